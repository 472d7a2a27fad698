//! What several of the engine's test modules share.

pub mod churn_workload;
pub mod flash_sink;
