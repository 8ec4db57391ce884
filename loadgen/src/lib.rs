//! What `loadgen`'s measurements are, for whoever reads them: [`stats`] holds the counts
//! of a run and its one-line result (`Figure`), which every measuring command prints and
//! `devtool` tabulates. The binary (`main.rs`) is the load generator itself.

pub mod stats;
