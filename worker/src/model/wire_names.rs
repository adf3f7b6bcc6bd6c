//! Tool names as the model APIs accept them, and back: defined with the registry
//! (`chorus_proto::tools::wire_names`), used by the two wire formats at the boundary.

pub use chorus_proto::tools::wire_names::*;
