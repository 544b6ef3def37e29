#include "apps/launch/launcher.h"
#include "apps/launch/local_nodes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

#include "apps/config/job_config.h"
#include "apps/launch/console.h"
#include "engine/error.h"
#include "sync/sync_stage.h"

namespace gradmesh::app {
namespace {

/// A partial line longer than this is relayed as a line of its own (bounds memory per node).
constexpr std::size_t kMaxLineBytes = 64 * 1024;
/// After the last node exits, how long to wait for its pipes' EOF (a grandchild may hold them).
constexpr std::uint64_t kDrainMs = 1000;
/// The merged console's period: held lines flushed, the bar redrawn (ms).
constexpr std::uint64_t kTickMs = 200;
/// Away from a terminal, seconds between the job's plain progress lines.
constexpr double kPlainProgressSeconds = 30.0;

std::uint64_t to_ms(double seconds) {
  return seconds <= 0.0 ? 0 : static_cast<std::uint64_t>(seconds * 1000.0 + 0.5);
}

class Launcher;
struct Node;

/// One of a node's output pipes (stdout or stderr) and its not yet relayed partial line.
struct Stream {
  Node* node = nullptr;
  int fd = STDOUT_FILENO;  ///< where its lines go
  uv_pipe_t pipe{};
  std::string pending;
  bool open = false;  ///< initialised and not yet closing
};

/// One gradmesh-node process.
struct Node {
  Launcher* launcher = nullptr;
  std::size_t rank = 0;
  std::string prefix;  ///< "[rank] "
  uv_process_t process{};
  Stream out;
  Stream err;
  bool running = false;  ///< spawned and not yet exited
  bool exited = false;
  std::string spawn_error;  ///< set if it could not be started
  std::int64_t exit_status = 0;
  std::ofstream log;  ///< --log-dir's DIR/node-<rank>.log (not open without it)
  int term_signal = 0;
  int signal_sent = 0;  ///< the last signal the launcher sent it (0: none)

  [[nodiscard]] bool failed() const {
    return !spawn_error.empty() || (exited && (exit_status != 0 || term_signal != 0));
  }
};

class Launcher final {
 public:
  /// `survivable`: why the job goes on without a failed node (empty: it does not).
  Launcher(const LaunchOptions& options, std::vector<std::uint16_t> ports, std::string survivable)
      : options_(options), ports_(std::move(ports)), survivable_(std::move(survivable)) {
    if (!options_.all_ranks) {
      merger_.emplace(options_.nodes);
      const char* term = std::getenv("TERM");
      bar_terminal_ =
          ::isatty(STDOUT_FILENO) == 1 && (term == nullptr || std::string(term) != "dumb");
    }
  }
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  int run() {
    uv_loop_init(&loop_);
    for (uv_timer_t* t : {&grace_timer_, &kill_timer_, &drain_timer_, &tick_timer_}) {
      uv_timer_init(&loop_, t);
      t->data = this;
    }
    if (merger_) uv_timer_start(&tick_timer_, &Launcher::on_tick, kTickMs, kTickMs);
    last_plain_ = now();
    for (uv_signal_t* s : {&sigint_, &sigterm_}) {
      uv_signal_init(&loop_, s);
      s->data = this;
    }
    uv_signal_start(&sigint_, &Launcher::on_signal, SIGINT);
    uv_signal_start(&sigterm_, &Launcher::on_signal, SIGTERM);

    nodes_.reserve(options_.nodes);
    for (std::size_t rank = 0; rank < options_.nodes; ++rank) {
      nodes_.push_back(std::make_unique<Node>());
      spawn(*nodes_.back(), rank);
      if (!nodes_.back()->spawn_error.empty()) break;  // do not start the rest
    }
    check_done();
    uv_run(&loop_, UV_RUN_DEFAULT);
    uv_loop_close(&loop_);
    return summarize();
  }

 private:
  // ---- starting ----

  void spawn(Node& node, std::size_t rank) {
    node.launcher = this;
    node.rank = rank;
    // (appends rather than "[" + std::to_string(...): GCC 12 gives a false -Wrestrict there)
    node.prefix.assign("[").append(std::to_string(rank)).append("] ");
    node.process.data = &node;
    for (Stream* s : {&node.out, &node.err}) {
      s->node = &node;
      uv_pipe_init(&loop_, &s->pipe, 0);
      s->pipe.data = s;
      s->open = true;
    }
    node.err.fd = STDERR_FILENO;

    if (options_.log_dir) {
      const auto path = *options_.log_dir / ("node-" + std::to_string(rank) + ".log");
      node.log.open(path, std::ios::binary | std::ios::trunc);
      if (!node.log)
        notice("cannot write " + path.string() + ": rank " + std::to_string(rank) +
               "'s log goes to the console only");
    }
    std::vector<std::string> args = node_command(options_, ports_, rank);
    if (options_.verbose) notice("rank " + std::to_string(rank) + ": " + join(args, " "));
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string file = options_.node_binary.string();

    std::array<uv_stdio_container_t, 3> stdio{};
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
    stdio[1].data.stream = reinterpret_cast<uv_stream_t*>(&node.out.pipe);
    stdio[2].flags = static_cast<uv_stdio_flags>(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
    stdio[2].data.stream = reinterpret_cast<uv_stream_t*>(&node.err.pipe);

    uv_process_options_t spawn_options{};
    spawn_options.file = file.c_str();
    spawn_options.args = argv.data();
    // Inherited, plus GRADMESH_CONSOLE=records for the merged console.
    std::vector<std::string> env_strings;
    std::vector<char*> env;
    if (merger_) {
      const std::string ours = std::string(kConsoleVariable) + "=";
      for (char** e = environ; *e != nullptr; ++e) {
        if (!std::string_view(*e).starts_with(ours)) env_strings.emplace_back(*e);
      }
      env_strings.push_back(ours + "records");
      for (std::string& e : env_strings) env.push_back(e.data());
      env.push_back(nullptr);
    }
    spawn_options.env = merger_ ? env.data() : nullptr;  // nullptr: inherit
    spawn_options.stdio_count = static_cast<int>(stdio.size());
    spawn_options.stdio = stdio.data();
    spawn_options.exit_cb = &Launcher::on_exit;

    const int rc = uv_spawn(&loop_, &node.process, &spawn_options);
    if (rc != 0) {
      node.spawn_error = std::string(uv_strerror(rc));
      notice("rank " + std::to_string(rank) + ": cannot start " + file + ": " + node.spawn_error);
      uv_close(reinterpret_cast<uv_handle_t*>(&node.process), nullptr);
      for (Stream* s : {&node.out, &node.err}) close_stream(*s);
      if (first_failure_ == nullptr) first_failure_ = &node;
      terminate_all(SIGTERM);  // the others cannot form the cluster: stop them now
      return;
    }
    node.running = true;
    for (Stream* s : {&node.out, &node.err}) {
      uv_read_start(reinterpret_cast<uv_stream_t*>(&s->pipe), &Launcher::on_alloc,
                    &Launcher::on_read);
    }
  }

  // ---- relaying output ----

  static void on_alloc(uv_handle_t* handle, std::size_t /*suggested*/, uv_buf_t* buf) {
    Launcher& self = *static_cast<Stream*>(handle->data)->node->launcher;
    *buf = uv_buf_init(self.read_buffer_.data(), static_cast<unsigned>(self.read_buffer_.size()));
  }

  static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
    Stream& s = *static_cast<Stream*>(stream->data);
    Launcher& self = *s.node->launcher;
    if (nread > 0) {
      s.pending.append(buf->base, static_cast<std::size_t>(nread));
      self.relay_lines(s);
    } else if (nread < 0) {  // UV_EOF or a read error: either way this pipe is done
      self.close_stream(s);
      self.check_done();
    }
  }

  /// Relays every complete line of `s.pending` with one write, so lines never interleave.
  void relay_lines(Stream& s) {
    std::string out;
    std::size_t start = 0;
    for (std::size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      relay_line(s, std::string_view(s.pending).substr(start, nl - start), out);
    }
    s.pending.erase(0, start);
    if (s.pending.size() > kMaxLineBytes) {
      relay_line(s, s.pending, out);
      s.pending.clear();
    }
    if (!out.empty()) write_all(s.fd, out);
  }

  /// One line of `s` (without its '\n'): to the node's log file; then merged (stdout, by default)
  /// or appended to `out` with the node's prefix.
  void relay_line(Stream& s, std::string_view line, std::string& out) {
    if (s.node->log.is_open()) {
      s.node->log << line << '\n';
      s.node->log.flush();
    }
    if (merger_ && s.fd == STDOUT_FILENO) {
      print_merged(merger_->add(s.node->rank, line, now()));
      return;
    }
    out += s.node->prefix;
    out += line;
    out += '\n';
  }

  // ---- the merged console ----

  /// The launcher's own message on stderr ("gradmesh-launch: ..."), the progress bar cleared
  /// first when stdout and stderr share the terminal, so the message does not run on from it.
  void notice(std::string_view message) {
    if (bar_drawn_) {
      write_all(STDOUT_FILENO, "\r\033[K");
      bar_drawn_ = false;
    }
    say(message);
  }

  [[nodiscard]] double now() const { return static_cast<double>(uv_now(&loop_)) / 1000.0; }

  /// Prints merged lines above the progress bar (cleared first, redrawn after).
  void print_merged(const std::vector<std::string>& lines) {
    if (lines.empty()) return;
    std::string out = bar_drawn_ ? "\r\033[K" : "";
    for (const std::string& line : lines) out += line;
    bar_drawn_ = false;
    write_all(STDOUT_FILENO, out);
    draw_bar(true);
  }

  /// The job's progress: on a terminal a bar redrawn in place; elsewhere a line every 30 s.
  void draw_bar(bool force) {
    if (!merger_) return;
    if (!bar_terminal_) {
      if (now() - last_plain_ < kPlainProgressSeconds) return;
      if (const auto text = merger_->progress_text(0)) {
        write_all(STDOUT_FILENO, "progress: " + *text + "\n");
        last_plain_ = now();
      }
      return;
    }
    const auto text = merger_->progress_text(24);
    if (!text) {
      if (bar_drawn_) write_all(STDOUT_FILENO, "\r\033[K");
      bar_drawn_ = false;
      bar_text_.clear();
      return;
    }
    if (!force && bar_drawn_ && *text == bar_text_) return;
    write_all(STDOUT_FILENO, "\r" + *text + "\033[K");
    bar_drawn_ = true;
    bar_text_ = *text;
  }

  static void on_tick(uv_timer_t* timer) {
    Launcher& self = *static_cast<Launcher*>(timer->data);
    self.print_merged(self.merger_->flush(self.now(), false));
    self.draw_bar(false);
  }

  /// Stops reading `s`, relays its last partial line and closes its pipe.
  void close_stream(Stream& s) {
    if (!s.open) return;
    s.open = false;
    if (!s.pending.empty()) {
      std::string out;
      relay_line(s, s.pending, out);
      if (!out.empty()) write_all(s.fd, out);
      s.pending.clear();
    }
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&s.pipe));
    uv_close(reinterpret_cast<uv_handle_t*>(&s.pipe), nullptr);
  }

  // ---- exits, failures and signals ----

  static void on_exit(uv_process_t* process, std::int64_t exit_status, int term_signal) {
    Node& node = *static_cast<Node*>(process->data);
    Launcher& self = *node.launcher;
    node.running = false;
    node.exited = true;
    node.exit_status = exit_status;
    node.term_signal = term_signal;
    uv_close(reinterpret_cast<uv_handle_t*>(process), nullptr);
    if (node.failed() && self.phase_ == Phase::kRunning) {
      const bool first = self.first_failure_ == nullptr;
      if (first) self.first_failure_ = &node;
      if (first && !self.survivable_.empty() && self.live_count() > 0) {
        // The others detect the failure and go on without it; a later failure starts the grace.
        self.notice("rank " + std::to_string(node.rank) + " " + describe_exit(node) +
                    "; the other nodes go on without it (" + self.survivable_ + ")");
      } else {
        self.notice("rank " + std::to_string(node.rank) + " " + describe_exit(node) + "; " +
                    (self.live_count() > 0 ? "the other nodes have " +
                                                 seconds(self.options_.grace_seconds) + " to finish"
                                           : std::string("no other node is running")));
        self.start_grace();
      }
    }
    self.check_done();
  }

  static void on_signal(uv_signal_t* handle, int signum) {
    Launcher& self = *static_cast<Launcher*>(handle->data);
    self.interrupted_ = signum;
    self.notice("got " + signal_name(signum) + ": forwarding it to the nodes");
    self.send_to_live(signum);
    self.start_grace();
  }

  /// Arms the grace timer, once: when it fires, SIGTERM then SIGKILL.
  void start_grace() {
    if (phase_ != Phase::kRunning) return;
    phase_ = Phase::kGrace;
    uv_timer_start(&grace_timer_, &Launcher::on_grace_timeout, to_ms(options_.grace_seconds), 0);
  }

  static void on_grace_timeout(uv_timer_t* timer) {
    static_cast<Launcher*>(timer->data)->terminate_all(SIGTERM);
  }

  static void on_kill_timeout(uv_timer_t* timer) {
    Launcher& self = *static_cast<Launcher*>(timer->data);
    if (self.live_count() == 0) return;
    self.notice("sending SIGKILL to " + self.live_ranks());
    self.send_to_live(SIGKILL);
  }

  /// Sends SIGTERM (now) and SIGKILL (after kill_after_seconds) to the nodes still running.
  void terminate_all(int signum) {
    if (phase_ == Phase::kTerminating) return;
    phase_ = Phase::kTerminating;
    uv_timer_stop(&grace_timer_);
    if (live_count() == 0) return;
    notice("sending " + signal_name(signum) + " to " + live_ranks());
    send_to_live(signum);
    uv_timer_start(&kill_timer_, &Launcher::on_kill_timeout, to_ms(options_.kill_after_seconds), 0);
  }

  void send_to_live(int signum) {
    for (auto& node : nodes_) {
      if (!node->running) continue;
      uv_process_kill(&node->process, signum);
      node->signal_sent = signum;
    }
  }

  [[nodiscard]] std::size_t live_count() const {
    return static_cast<std::size_t>(
        std::count_if(nodes_.begin(), nodes_.end(), [](const auto& n) { return n->running; }));
  }

  [[nodiscard]] std::string live_ranks() const {
    std::vector<std::string> ranks;
    for (const auto& node : nodes_) {
      if (node->running) ranks.push_back(std::to_string(node->rank));
    }
    return (ranks.size() == 1 ? "rank " : "ranks ") + join(ranks, ", ");
  }

  // ---- finishing ----

  /// Once every node has exited: waits briefly for their pipes, then closes the loop's handles.
  void check_done() {
    if (finishing_ || live_count() > 0) return;
    const bool pipes_open = std::any_of(nodes_.begin(), nodes_.end(),
                                        [](const auto& n) { return n->out.open || n->err.open; });
    if (pipes_open) {
      if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&drain_timer_))) {
        uv_timer_start(&drain_timer_, &Launcher::on_drain_timeout, kDrainMs, 0);
      }
      return;
    }
    finishing_ = true;
    if (merger_) {  // what is still held, then the bar cleared
      print_merged(merger_->flush(now(), true));
      if (bar_drawn_) write_all(STDOUT_FILENO, "\r\033[K");
      bar_drawn_ = false;
    }
    for (uv_timer_t* t : {&grace_timer_, &kill_timer_, &drain_timer_, &tick_timer_}) {
      uv_close(reinterpret_cast<uv_handle_t*>(t), nullptr);
    }
    for (uv_signal_t* s : {&sigint_, &sigterm_}) {
      uv_close(reinterpret_cast<uv_handle_t*>(s), nullptr);
    }
  }

  static void on_drain_timeout(uv_timer_t* timer) {
    Launcher& self = *static_cast<Launcher*>(timer->data);
    for (auto& node : self.nodes_) {
      for (Stream* s : {&node->out, &node->err}) self.close_stream(*s);
    }
    self.check_done();
  }

  static std::string seconds(double s) {
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), "%g s", s);
    return buf.data();
  }

  static std::string describe_exit(const Node& node) {
    if (!node.spawn_error.empty()) return "could not be started: " + node.spawn_error;
    if (node.term_signal != 0) {
      std::string text = "was killed by " + signal_name(node.term_signal);
      if (node.term_signal == node.signal_sent) text += " (sent by the launcher)";
      return text;
    }
    return "exited with code " + std::to_string(node.exit_status);
  }

  int summarize() const {
    std::vector<std::string> failures;
    for (const auto& node : nodes_) {
      if (!node->failed()) continue;
      std::string line = "rank " + std::to_string(node->rank) + " " + describe_exit(*node);
      if (node.get() == first_failure_) line += " (first to fail)";
      failures.push_back(std::move(line));
    }
    const std::size_t not_started = options_.nodes - nodes_.size();
    if (!failures.empty()) {
      std::string text = std::to_string(failures.size()) + " of " + std::to_string(options_.nodes) +
                         " nodes failed: " + join(failures, "; ");
      if (not_started > 0) text += "; " + std::to_string(not_started) + " not started";
      say(text);
    }
    if (interrupted_ != 0) return 128 + interrupted_;
    return failures.empty() && not_started == 0 ? 0 : 1;
  }

  enum class Phase { kRunning, kGrace, kTerminating };

  const LaunchOptions& options_;
  const std::vector<std::uint16_t> ports_;
  uv_loop_t loop_{};
  uv_timer_t grace_timer_{};
  uv_timer_t kill_timer_{};
  uv_timer_t drain_timer_{};
  uv_timer_t tick_timer_{};              // the merged console's flush and bar
  std::optional<ConsoleMerger> merger_;  // unset with all_ranks
  bool bar_terminal_ = false;            // stdout is a terminal: draw the bar in place
  bool bar_drawn_ = false;
  std::string bar_text_;
  double last_plain_ = 0;
  uv_signal_t sigint_{};
  uv_signal_t sigterm_{};
  std::vector<std::unique_ptr<Node>> nodes_;  // unique_ptr: libuv holds pointers into each Node
  std::array<char, 64 * 1024> read_buffer_{};
  Phase phase_ = Phase::kRunning;
  const Node* first_failure_ = nullptr;
  std::string survivable_;  // why the job goes on without a failed node; empty: it does not
  int interrupted_ = 0;     // the last signal the launcher got, 0 if none
  bool finishing_ = false;
};

}  // namespace

int run_local_nodes(const LaunchOptions& options, std::vector<std::uint16_t> ports,
                    std::string survivable) {
  Launcher launcher(options, std::move(ports), std::move(survivable));
  return launcher.run();
}

}  // namespace gradmesh::app
