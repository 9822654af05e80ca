// tracebox sdk-interop: a minimal host for the REAL Perfetto tracing service.
//
// This translation unit is the Perfetto C SDK amalgamation (vendored by the
// perfetto-sdk-sys crate, which also carries the service and its IPC layer)
// followed by one small C entry point of ours. build.rs compiles it into the
// libperfetto_c.a that perfetto-sdk-sys links, and src/bin/real-traced.rs
// calls tbx_real_traced_run().

#include "perfetto_c.cc"

#include <signal.h>
#include <stdio.h>
#include <unistd.h>

namespace {

// Write end of the self-pipe that turns SIGINT/SIGTERM into a task.
int g_quit_pipe_wr = -1;

void OnQuitSignal(int) {
  if (g_quit_pipe_wr >= 0) {
    char c = 'q';
    ssize_t ignored = write(g_quit_pipe_wr, &c, 1);
    (void)ignored;
  }
}

// Path sockets are unlinked first, like traced does; abstract ("@...")
// names and host:port endpoints are left alone.
void RemoveStaleSocketFile(const std::string& name) {
  if (!name.empty() && name[0] == '/')
    unlink(name.c_str());
}

}  // namespace

// Runs the service on the given endpoints until SIGINT/SIGTERM.
// `producer_sockets` may be a comma-separated list; with `expose_relay`,
// every one of them also serves the RelayPort service (as upstream traced's
// --enable-relay-endpoint). If `notify_fd` >= 0, one byte is written to it
// (then it is closed) once both sockets listen.
// Returns 0 on clean shutdown, 1 if the sockets could not be opened.
extern "C" int tbx_real_traced_run(const char* producer_sockets,
                                   const char* consumer_socket,
                                   int notify_fd,
                                   int expose_relay) {
  int quit_pipe[2];
  if (pipe(quit_pipe) != 0) {
    perror("real-traced: pipe");
    return 1;
  }
  g_quit_pipe_wr = quit_pipe[1];
  struct sigaction sa = {};
  sa.sa_handler = OnQuitSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  perfetto::base::MaybeLockFreeTaskRunner task_runner;
  std::unique_ptr<perfetto::ServiceIPCHost> host =
      perfetto::ServiceIPCHost::CreateInstance(&task_runner);

  std::list<perfetto::ListenEndpoint> producer_endpoints;
  for (const std::string& name :
       perfetto::TokenizeProducerSockets(producer_sockets)) {
    RemoveStaleSocketFile(name);
    producer_endpoints.emplace_back(name);
    producer_endpoints.back().expose_relay_endpoint = expose_relay != 0;
  }
  RemoveStaleSocketFile(consumer_socket);
  if (!host->Start(std::move(producer_endpoints),
                   perfetto::ListenEndpoint(consumer_socket))) {
    fprintf(stderr, "real-traced: cannot listen on %s / %s\n",
            producer_sockets, consumer_socket);
    return 1;
  }

  task_runner.AddFileDescriptorWatch(quit_pipe[0], [&task_runner] {
    task_runner.Quit();
  });

  if (notify_fd >= 0) {
    ssize_t ignored = write(notify_fd, "1", 1);
    (void)ignored;
    close(notify_fd);
  }
  fprintf(stderr, "real-traced: listening producer=%s consumer=%s%s\n",
          producer_sockets, consumer_socket,
          expose_relay ? " (with RelayPort)" : "");

  task_runner.Run();

  task_runner.RemoveFileDescriptorWatch(quit_pipe[0]);
  host.reset();
  close(quit_pipe[0]);
  close(quit_pipe[1]);
  g_quit_pipe_wr = -1;
  return 0;
}
