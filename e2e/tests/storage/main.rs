//! Storage: the schema and its migrations, retention, modern ClickHouse (chdb) and the
//! 2 x 2 cluster. One test binary, a module per concern.

mod cluster;
mod modern_clickhouse;
mod retention;
mod schema;
