//! wrk: a measured run of Debian's `wrk`, and the batches its script posts.

use std::sync::Arc;

use crate::cli::{WrkArgs, WrkBatchesArgs};
use crate::clickhouse::check_run_id;
use crate::traffic::{Sites, Traffic};
use crate::wrk;
use loadgen::stats::Figure;

pub fn measure(args: WrkArgs) -> anyhow::Result<Figure> {
    if args.warmup > 0.0 {
        wrk::run(&args.wrk, args.warmup, None)?;
    }
    let watch = args.label.watch()?;
    let (report, cpu) = wrk::run(&args.wrk, args.duration, Some(&watch))?;
    let label = &args.label;
    Ok(report.figure(
        &label.bench,
        &label.subject,
        &args.unit,
        args.units_per_request,
        cpu,
    ))
}

pub fn batches(args: WrkBatchesArgs) -> anyhow::Result<()> {
    check_run_id(&args.run)?;
    let sites = Arc::new(Sites::from_file(&args.snapshot)?);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut traffic = Traffic::new(sites, &args.run, 1);
    wrk::write_batches(&mut traffic, args.count, args.format, &mut out)?;
    std::io::Write::flush(&mut out)?;
    Ok(())
}
