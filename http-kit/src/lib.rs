//! What every service's process shares around its own routes: the serving loop, the
//! operational routes (`/healthz`, `/readyz`, `/metrics`) with logging and the metrics
//! recorder behind them, the one JSON error shape, CORS, the API route answered in front
//! of the router, and the hot reload of the experiments snapshot (a file or an
//! `http(s)://` URL). No Kafka here: a service that does not talk to Kafka does not link
//! librdkafka.

pub mod cors;
pub mod error;
pub mod ops;
mod refusals;
pub mod reload;
pub mod route;
pub mod serve;
pub mod telemetry;
