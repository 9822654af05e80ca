// tracebox sdk-interop: the same test data source as sdk-producer, written
// with the Perfetto C SDK's own inline API (perfetto/public/data_source.h and
// the generated protozero helpers), for `sdk-producer --api c`. This is the
// path C/C++ SDK users take, without the Rust bindings' per-message overhead.

#include "perfetto_c.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace {

struct PerfettoDs g_ds = PERFETTO_DS_INIT();
std::atomic<bool> g_started{false};
std::atomic<bool> g_stop_requested{false};
std::mutex g_stoppers_mutex;
std::vector<PerfettoDsAsyncStopper*> g_stoppers;

void OnStart(struct PerfettoDsImpl*, PerfettoDsInstanceIndex, void*, void*,
             struct PerfettoDsOnStartArgs*) {
  g_started.store(true);
}

void OnStop(struct PerfettoDsImpl*, PerfettoDsInstanceIndex, void*, void*,
            struct PerfettoDsOnStopArgs* args) {
  // Acknowledged from tbx_c_ds_stop_done() once the writers are finished.
  std::lock_guard<std::mutex> lock(g_stoppers_mutex);
  g_stoppers.push_back(PerfettoDsOnStopArgsPostpone(args));
  g_stop_requested.store(true);
}

}  // namespace

// policy: 0 drop, 1 stall and abort, 2 stall and drop (the C enum's values).
extern "C" bool tbx_c_ds_register(const char* name, int policy) {
  struct PerfettoDsParams params = PerfettoDsParamsDefault();
  params.on_start_cb = OnStart;
  params.on_stop_cb = OnStop;
  params.buffer_exhausted_policy =
      static_cast<enum PerfettoDsBufferExhaustedPolicy>(policy);
  params.buffer_exhausted_policy_configurable = true;
  params.will_notify_on_stop = true;
  return PerfettoDsRegister(&g_ds, name, params);
}

extern "C" bool tbx_c_ds_started() {
  return g_started.load();
}

extern "C" bool tbx_c_ds_stop_requested() {
  return g_stop_requested.load();
}

extern "C" void tbx_c_ds_stop_done() {
  std::lock_guard<std::mutex> lock(g_stoppers_mutex);
  for (PerfettoDsAsyncStopper* s : g_stoppers)
    PerfettoDsStopDone(s);
  g_stoppers.clear();
}

// One TracePacket { for_testing { str, seq_value, counter, is_last } } to
// every active instance, from the calling thread's writer.
extern "C" void tbx_c_ds_write_packet(uint32_t thread,
                                      uint32_t seq,
                                      bool last,
                                      const uint8_t* payload,
                                      size_t size) {
  PERFETTO_DS_TRACE(g_ds, it) {
    struct PerfettoDsRootTracePacket root;
    PerfettoDsTracerPacketBegin(&it, &root);
    struct perfetto_protos_TestEvent event;
    perfetto_protos_TracePacket_begin_for_testing(&root.msg, &event);
    perfetto_protos_TestEvent_set_str(&event, payload, size);
    perfetto_protos_TestEvent_set_seq_value(&event, seq);
    perfetto_protos_TestEvent_set_counter(&event, thread);
    if (last)
      perfetto_protos_TestEvent_set_is_last(&event, true);
    perfetto_protos_TracePacket_end_for_testing(&root.msg, &event);
    PerfettoDsTracerPacketEnd(&it, &root);
  }
}

// Commits the calling thread's chunk; `cb(arg)` runs once the service has
// acked. Returns false (and never calls cb) if no instance is active.
extern "C" bool tbx_c_ds_flush(void (*cb)(void*), void* arg) {
  bool asked = false;
  PERFETTO_DS_TRACE(g_ds, it) {
    if (!asked)
      PerfettoDsTracerFlush(&it, cb, arg);
    asked = true;
  }
  return asked;
}

// Packets this thread's writer dropped (SMB exhausted) so far.
extern "C" uint64_t tbx_c_ds_drop_count() {
  uint64_t drops = 0;
  PERFETTO_DS_TRACE(g_ds, it) {
    drops += PerfettoDsTracerGetDropCount(&it);
  }
  return drops;
}
