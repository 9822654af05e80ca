//! IPC method tables, generated from the `service` blocks in proto/ipc/.
//!
//! Perfetto numbers methods 1..N in declaration order when a service is
//! bound, so these lists must keep the .proto order.

include!(concat!(env!("OUT_DIR"), "/services.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_port_order() {
        assert_eq!(PRODUCER_PORT_METHODS.len(), 12);
        assert_eq!(PRODUCER_PORT_METHODS[0], "InitializeConnection");
        assert_eq!(PRODUCER_PORT_METHODS[4], "GetAsyncCommand");
        assert_eq!(PRODUCER_PORT_METHODS[11], "UpdateDataSource");
    }

    #[test]
    fn consumer_port_order() {
        assert_eq!(CONSUMER_PORT_METHODS.len(), 15);
        assert_eq!(CONSUMER_PORT_METHODS[0], "EnableTracing");
        assert_eq!(CONSUMER_PORT_METHODS[2], "ReadBuffers");
        assert_eq!(CONSUMER_PORT_METHODS[14], "CloneSession");
    }

    #[test]
    fn relay_port_order() {
        assert_eq!(RELAY_PORT_METHODS, ["InitRelay", "SyncClock"]);
    }
}
