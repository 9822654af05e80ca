//! Activating triggers: `trigger_perfetto NAME...` and `perfetto -c CFG`
//! where the config holds only `activate_triggers`. Both connect to the
//! producer socket as producer `perfetto_cmd_producer`, fire and forget.

use std::time::{Duration, Instant};

use super::rpc::{encode, Port};
use crate::pb::protos::{ActivateTriggersRequest, InitializeConnectionRequest};

/// Upstream gives up when it cannot connect within 10 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends `triggers`; exit status 0 once sent, 1 if the service could not be
/// reached in time.
pub fn activate(producer_socket: &str, triggers: &[String]) -> i32 {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut port = loop {
        match Port::connect(producer_socket, "ProducerPort") {
            Ok(p) => break p,
            Err(e) if Instant::now() >= deadline => {
                eprintln!("{e}");
                return 1;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    port.client.set_timeout(Some(CONNECT_TIMEOUT));
    let init = InitializeConnectionRequest {
        producer_name: Some("perfetto_cmd_producer".into()),
        ..Default::default()
    };
    if let Err(e) = port.call::<_, crate::pb::protos::InitializeConnectionResponse>(
        "InitializeConnection",
        &init,
        None,
    ) {
        eprintln!("{e}");
        return 1;
    }
    let req = ActivateTriggersRequest {
        trigger_names: triggers.to_vec(),
    };
    match port
        .client
        .invoke_no_reply(&port.service, "ActivateTriggers", &encode(&req), None)
    {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ActivateTriggers: {e}");
            1
        }
    }
}
