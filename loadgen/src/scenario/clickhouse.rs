//! ClickHouse: the reference insert, the arrival of rows, their comparison and their
//! bytes on disk.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{peak_rss_kib, watched};
use crate::cli::{DiskArgs, InsertArgs, RowsArgs, SameRowsArgs, WaitArgs};
use crate::clickhouse::{self, ClickHouse};
use crate::traffic::{Sites, Traffic};
use loadgen::stats::Figure;

pub async fn insert(args: InsertArgs) -> anyhow::Result<Figure> {
    let sites = Arc::new(Sites::from_file(&args.snapshot)?);
    let now = contract::event::now_millis();
    let mut traffic = Traffic::new(sites, &args.run, 1);
    let mut rows = Vec::with_capacity(args.rows as usize);
    while (rows.len() as u64) < args.rows {
        rows.extend(
            traffic
                .next_messages(now)
                .into_iter()
                .map(schema::EventRow::from),
        );
    }
    rows.truncate(args.rows as usize);
    let clickhouse = ClickHouse::new(&args.clickhouse);
    clickhouse.recreate(&args.database).await?;
    let (elapsed, cpu) = watched(
        &args.label,
        clickhouse::reference_insert(&clickhouse, &args.database, &rows, args.batch),
    )
    .await?;
    let stored = clickhouse
        .count(&format!("SELECT count() FROM {}.events", args.database))
        .await?;
    anyhow::ensure!(stored == args.rows, "{stored} rows stored of {}", args.rows);
    let rate = args.rows as f64 / elapsed.as_secs_f64().max(1e-9);
    Ok(args.label.figure("rows", rate, args.rows, cpu))
}

pub async fn wait_rows(args: WaitArgs) -> anyhow::Result<Figure> {
    let clickhouse = ClickHouse::new(&args.clickhouse);
    let timeout = Duration::from_secs(args.timeout);
    let watch = args.label.watch()?;
    let (drain, cpu) =
        clickhouse::wait_rows(&clickhouse, &args.table, args.rows, timeout, &watch).await?;
    Ok(Figure {
        rss_kib: args.pid.map(peak_rss_kib).transpose()?,
        ..args.label.figure("rows", drain.rate, drain.rows, cpu)
    })
}

pub async fn rows(args: RowsArgs) -> anyhow::Result<()> {
    let clickhouse = ClickHouse::new(&args.clickhouse);
    let timeout = Duration::from_secs(args.timeout);
    let stored = clickhouse::wait_ids(&clickhouse, &args.database, args.ids, timeout).await?;
    println!("{stored}");
    Ok(())
}

pub async fn same_rows(args: SameRowsArgs) -> anyhow::Result<()> {
    let SameRowsArgs {
        clickhouse,
        expected,
        actual,
        tables,
    } = args;
    let clickhouse = ClickHouse::new(&clickhouse);
    for table in &tables {
        let want = clickhouse::checksum(&clickhouse, &expected, table).await?;
        let got = clickhouse::checksum(&clickhouse, &actual, table).await?;
        anyhow::ensure!(
            want == got,
            "{actual}.{table} differs from {expected}.{table}: rows and checksum {got} against {want}"
        );
        eprintln!("   {actual}.{table} = {expected}.{table}: rows and checksum {got}");
    }
    Ok(())
}

pub async fn disk(args: DiskArgs) -> anyhow::Result<Figure> {
    let DiskArgs {
        label,
        clickhouse,
        database,
    } = args;
    let (rows, bytes) = clickhouse::disk_bytes(&ClickHouse::new(&clickhouse), &database).await?;
    anyhow::ensure!(rows > 0, "{database}.events holds no row");
    Ok(Figure {
        bytes_per_unit: Some(bytes as f64 / rows as f64),
        ..label.figure("events", 0.0, rows, BTreeMap::new())
    })
}
