//! laya-core integration tests, linked as one binary: request validation against upstream's
//! references and the §13 cases, and routing.

mod decide;
mod request;
mod routing;
