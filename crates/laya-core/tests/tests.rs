//! laya-core integration tests, linked as one binary: request validation against upstream's
//! references and the §13 cases, routing, and the
//! refusal of malformed checkpoints at load.

mod decide;
mod load;
mod request;
mod routing;
