//! The factory the producer uses: one data source instance per
//! SetupDataSource, built by the folder that owns that source.

use super::data_source::{self, DataSource, Env};
use crate::pb::protos::DataSourceConfig;
use crate::tracing::core::trace_writer::TraceWriter;

/// Creates the instance for `config.name` (SetupDataSource).
pub fn create(
    id: u64,
    config: &DataSourceConfig,
    writer: TraceWriter,
    env: &mut Env<'_>,
) -> Result<Box<dyn DataSource>, String> {
    let name = config.name.as_deref().unwrap_or("");
    Ok(match name {
        data_source::FTRACE => Box::new(super::ftrace::data_source::FtraceSource::setup(
            id, config, writer, env,
        )?),
        data_source::PROCESS_STATS => Box::new(super::ps::data_source::ProcessStatsSource::new(
            config, writer,
        )),
        data_source::SYS_STATS => Box::new(super::sys_stats::data_source::SysStatsSource::new(
            config, writer,
        )),
        data_source::SYSTEM_INFO => Box::new(
            super::system_info::data_source::SystemInfoSource::new(config, writer),
        ),
        data_source::SYSFS_POWER => Box::new(super::power::data_source::PowerSource::new(writer)),
        other => return Err(format!("unknown data source {other:?}")),
    })
}
