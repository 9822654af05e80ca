//! The data sources, one file each, and the factory the producer uses.

mod ftrace;
mod power;
mod process_stats;
mod sys_stats;
mod system_info;

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
        data_source::FTRACE => Box::new(ftrace::FtraceSource::setup(id, config, writer, env)?),
        data_source::PROCESS_STATS => {
            Box::new(process_stats::ProcessStatsSource::new(config, writer))
        }
        data_source::SYS_STATS => Box::new(sys_stats::SysStatsSource::new(config, writer)),
        data_source::SYSTEM_INFO => Box::new(system_info::SystemInfoSource::new(writer)),
        data_source::SYSFS_POWER => Box::new(power::PowerSource::new(writer)),
        other => return Err(format!("unknown data source {other:?}")),
    })
}
