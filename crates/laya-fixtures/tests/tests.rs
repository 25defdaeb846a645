//! laya-fixtures integration tests, linked as one binary: layout and decoding on upstream's
//! recorded logits, predict_long's windows, and the committed fixtures against their manifest.

mod layout_decode;
mod long_windows;
mod manifest;
