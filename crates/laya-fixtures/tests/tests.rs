//! laya-fixtures integration tests, linked as one binary: layout and decoding on upstream's
//! recorded logits, and predict_long's windows.

mod layout_decode;
mod long_windows;
