#include "test/kubelet_sim/kubelet_sim.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "proto/dra_api.h"
#include "proto/pluginregistration/api.grpc.pb.h"
#include "test/kubelet_sim/grpc_util.h"

namespace topodra::testing {
namespace {

using sim::Deadline;
using sim::Dial;
using sim::FromGrpc;
using sim::GrpcResult;

namespace reg = ::pluginregistration;

// The kubelet's values (spec §6), except the loop period and the retry backoff, which are
// shortened so that tests do not wait seconds for a retry.
constexpr absl::Duration kLoopPeriod = absl::Milliseconds(100);
constexpr absl::Duration kDialTimeout = absl::Seconds(10);
constexpr absl::Duration kGetInfoTimeout = absl::Seconds(1);
constexpr absl::Duration kNotifyTimeout = absl::Seconds(5);
constexpr absl::Duration kCallTimeout = absl::Seconds(45);
constexpr absl::Duration kInitialBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);
// How often a wait for a connection looks whether it was cancelled.
constexpr absl::Duration kCancelCheck = absl::Milliseconds(50);

constexpr char kDraPluginType[] = "DRAPlugin";
constexpr char kV1[] = "v1.DRAPlugin";
constexpr char kV1beta1[] = "v1beta1.DRAPlugin";

const char* StateName(grpc_connectivity_state s) {
  switch (s) {
    case GRPC_CHANNEL_IDLE:
      return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
      return "CONNECTING";
    case GRPC_CHANNEL_READY:
      return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
      return "SHUTDOWN";
  }
  return "UNKNOWN";
}

std::string ClaimsForLog(const std::vector<PrepareClaim>& claims) {
  return absl::StrCat("[",
                      absl::StrJoin(claims, ", ",
                                    [](std::string* out, const PrepareClaim& c) {
                                      absl::StrAppend(out, c.ns, "/", c.name, "/", c.uid);
                                    }),
                      "]");
}

std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

template <typename Request>
Request BuildRequest(const std::vector<PrepareClaim>& claims) {
  Request req;
  for (const PrepareClaim& c : claims) {
    auto* claim = req.add_claims();
    claim->set_namespace_(c.ns);
    claim->set_uid(c.uid);
    claim->set_name(c.name);
  }
  return req;
}

// The kubelet's checks of a response map (spec §4.3, §4.5): every key must be a requested UID
// and every requested UID must have an entry.
template <typename ProtoMap>
absl::Status CheckResponseKeys(const char* method, const std::vector<PrepareClaim>& claims,
                               const ProtoMap& results) {
  std::set<std::string> requested;
  for (const PrepareClaim& c : claims) requested.insert(c.uid);
  for (const auto& entry : results) {
    if (requested.count(entry.first) == 0) {
      return absl::InternalError(
          absl::StrCat(method, " returned result for unknown claim UID ", entry.first));
    }
  }
  std::vector<std::string> missing;
  for (const std::string& uid : requested) {
    if (results.count(uid) == 0) missing.push_back(uid);
  }
  if (!missing.empty()) {
    return absl::InternalError(absl::StrFormat("%s skipped %d ResourceClaims (no result for %s)",
                                               method, missing.size(),
                                               absl::StrJoin(missing, ", ")));
  }
  return absl::OkStatus();
}

template <typename Device>
PreparedDevice ToPreparedDevice(const Device& d) {
  PreparedDevice out;
  out.request_names.assign(d.request_names().begin(), d.request_names().end());
  out.pool = d.pool_name();
  out.device = d.device_name();
  out.cdi_device_ids.assign(d.cdi_device_ids().begin(), d.cdi_device_ids().end());
  if constexpr (requires { d.has_share_id(); }) {  // v1 only
    if (d.has_share_id()) out.share_id = d.share_id();
  }
  return out;
}

template <typename Api>
absl::StatusOr<std::map<std::string, ClaimResult>> CallPrepare(
    const std::shared_ptr<grpc::Channel>& channel, const std::vector<PrepareClaim>& claims,
    std::string* log) {
  auto stub = Api::DRAPlugin::NewStub(channel);
  auto req = BuildRequest<typename Api::NodePrepareResourcesRequest>(claims);
  typename Api::NodePrepareResourcesResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(kCallTimeout));
  grpc::Status s = stub->NodePrepareResources(&ctx, req, &resp);
  *log = GrpcResult(s);
  if (!s.ok()) return FromGrpc(s);
  std::vector<std::string> summary;
  for (const auto& [uid, result] : resp.claims()) {
    summary.push_back(result.error().empty()
                          ? absl::StrCat(uid, ": ", result.devices_size(), " devices")
                          : absl::StrCat(uid, ": error ", Quote(result.error())));
  }
  absl::StrAppend(log, " {", absl::StrJoin(summary, "; "), "}");
  if (absl::Status check = CheckResponseKeys("NodePrepareResources", claims, resp.claims());
      !check.ok()) {
    absl::StrAppend(log, " rejected: ", check.message());
    return check;
  }
  std::map<std::string, ClaimResult> out;
  for (const auto& [uid, result] : resp.claims()) {
    ClaimResult& r = out[uid];
    r.error = result.error();
    for (const auto& d : result.devices()) r.devices.push_back(ToPreparedDevice(d));
  }
  return out;
}

template <typename Api>
absl::StatusOr<std::map<std::string, std::string>> CallUnprepare(
    const std::shared_ptr<grpc::Channel>& channel, const std::vector<PrepareClaim>& claims,
    std::string* log) {
  auto stub = Api::DRAPlugin::NewStub(channel);
  auto req = BuildRequest<typename Api::NodeUnprepareResourcesRequest>(claims);
  typename Api::NodeUnprepareResourcesResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(kCallTimeout));
  grpc::Status s = stub->NodeUnprepareResources(&ctx, req, &resp);
  *log = GrpcResult(s);
  if (!s.ok()) return FromGrpc(s);
  std::vector<std::string> summary;
  for (const auto& [uid, result] : resp.claims()) {
    summary.push_back(result.error().empty()
                          ? absl::StrCat(uid, ": ok")
                          : absl::StrCat(uid, ": error ", Quote(result.error())));
  }
  absl::StrAppend(log, " {", absl::StrJoin(summary, "; "), "}");
  if (absl::Status check = CheckResponseKeys("NodeUnprepareResources", claims, resp.claims());
      !check.ok()) {
    absl::StrAppend(log, " rejected: ", check.message());
    return check;
  }
  std::map<std::string, std::string> out;
  for (const auto& [uid, result] : resp.claims()) out[uid] = result.error();
  return out;
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_ctim.tv_sec == b.st_ctim.tv_sec &&
         a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

std::string ErrnoText() { return std::generic_category().message(errno); }

bool Ignored(const std::string& name) { return name.empty() || name[0] == '.'; }

}  // namespace

class KubeletSimulator::Impl {
 public:
  explicit Impl(KubeletSimOptions opts) : opts_(std::move(opts)) {}

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    Wake();
    if (thread_.joinable()) thread_.join();
    if (inotify_fd_ >= 0) close(inotify_fd_);
    if (event_fd_ >= 0) close(event_fd_);
  }

  absl::Status Init() {
    std::error_code ec;
    std::filesystem::path root = std::filesystem::absolute(opts_.root_dir, ec);
    if (ec)
      return absl::InvalidArgumentError(
          absl::StrCat("root dir ", Quote(opts_.root_dir), ": ", ec.message()));
    registry_dir_ = (root / "plugins_registry").lexically_normal().string();
    std::filesystem::create_directories(registry_dir_, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("creating ", Quote(registry_dir_), ": ", ec.message()));
    }
    inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ < 0) return absl::InternalError(absl::StrCat("inotify_init1: ", ErrnoText()));
    event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", ErrnoText()));
    {
      absl::MutexLock lock(&mu_);
      if (!WatchTree(registry_dir_)) {
        return absl::InternalError(
            absl::StrCat("inotify_add_watch ", Quote(registry_dir_), ": ", ErrnoText()));
      }
    }
    thread_ = std::thread(&Impl::Run, this);
    return absl::OkStatus();
  }

  absl::StatusOr<Registration> WaitForRegistration(const std::string& driver, int min_generation,
                                                   absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    for (;;) {
      if (const Instance* i = Latest(driver); i != nullptr && i->reg.generation >= min_generation) {
        return i->reg;
      }
      if (absl::Now() >= deadline) break;
      cv_.WaitWithDeadline(&mu_, deadline);
    }
    std::string msg =
        absl::StrFormat("DRA driver %s not registered with generation >= %d within %s",
                        Quote(driver), min_generation, absl::FormatDuration(timeout));
    if (const Instance* i = Latest(driver); i != nullptr) {
      absl::StrAppend(&msg, " (registered with generation ", i->reg.generation, ")");
    }
    std::vector<std::string> errors;
    for (const auto& [path, b] : backoff_) {
      if (!b.last_error.empty()) errors.push_back(absl::StrCat(path, ": ", b.last_error));
    }
    if (!errors.empty()) absl::StrAppend(&msg, "; failing sockets: ", absl::StrJoin(errors, "; "));
    return absl::DeadlineExceededError(msg);
  }

  std::optional<Registration> Find(const std::string& driver) const {
    absl::MutexLock lock(&mu_);
    if (const Instance* i = Latest(driver); i != nullptr) return i->reg;
    return std::nullopt;
  }

  bool WaitForDeregistration(const std::string& driver, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    for (;;) {
      if (Latest(driver) == nullptr) return true;
      if (absl::Now() >= deadline) return false;
      cv_.WaitWithDeadline(&mu_, deadline);
    }
  }

  absl::StatusOr<std::map<std::string, ClaimResult>> Prepare(
      const std::string& driver, const std::vector<PrepareClaim>& claims) {
    std::shared_ptr<grpc::Channel> channel;
    std::string version;
    if (absl::Status s = Lookup(driver, &channel, &version); !s.ok()) return s;
    std::string result;
    auto out = version == kV1 ? CallPrepare<proto::DraV1>(channel, claims, &result)
                              : CallPrepare<proto::DraV1beta1>(channel, claims, &result);
    AddLog(absl::StrCat("NodePrepareResources driver=", driver, " version=", version,
                        " claims=", ClaimsForLog(claims), " -> ", result));
    return out;
  }

  absl::StatusOr<std::map<std::string, std::string>> Unprepare(
      const std::string& driver, const std::vector<PrepareClaim>& claims) {
    std::shared_ptr<grpc::Channel> channel;
    std::string version;
    if (absl::Status s = Lookup(driver, &channel, &version); !s.ok()) return s;
    std::string result;
    auto out = version == kV1 ? CallUnprepare<proto::DraV1>(channel, claims, &result)
                              : CallUnprepare<proto::DraV1beta1>(channel, claims, &result);
    AddLog(absl::StrCat("NodeUnprepareResources driver=", driver, " version=", version,
                        " claims=", ClaimsForLog(claims), " -> ", result));
    return out;
  }

  std::vector<std::string> Log() const {
    absl::MutexLock lock(&log_mu_);
    return log_;
  }

 private:
  // A socket in the watched tree. `seq` changes whenever the file at the path is a new one; the
  // kubelet uses the event's timestamp for the same purpose.
  struct DesiredSocket {
    uint64_t seq = 0;
    struct stat st {};
  };
  struct Instance {
    Registration reg;
    uint64_t seq = 0;
    std::shared_ptr<grpc::Channel> channel;
  };
  struct Backoff {
    uint64_t seq = 0;
    absl::Duration delay = absl::ZeroDuration();
    absl::Time next = absl::InfinitePast();
    std::string last_error;
  };
  struct Operation {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  void AddLog(std::string line) {
    absl::MutexLock lock(&log_mu_);
    log_.push_back(std::move(line));
  }

  void Wake() const {
    uint64_t one = 1;
    if (event_fd_ >= 0) {
      [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
    }
  }

  // The most recently registered instance of `driver` (spec §3: the kubelet prefers the newest).
  const Instance* Latest(const std::string& driver) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Instance* best = nullptr;
    for (const auto& [path, inst] : actual_) {
      if (inst.reg.driver == driver &&
          (best == nullptr || inst.reg.generation > best->reg.generation)) {
        best = &inst;
      }
    }
    return best;
  }

  absl::Status Lookup(const std::string& driver, std::shared_ptr<grpc::Channel>* channel,
                      std::string* version) {
    absl::MutexLock lock(&mu_);
    const Instance* i = Latest(driver);
    if (i == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("DRA driver ", driver, " is not registered"));
    }
    *channel = i->channel;
    *version = i->reg.version;
    return absl::OkStatus();
  }

  // Watches `dir` and, recursively, its sub-directories; records the sockets found. Watch first,
  // then list, so that nothing created in between is missed.
  bool WatchTree(const std::string& dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int wd = inotify_add_watch(
        inotify_fd_, dir.c_str(),
        IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR | IN_DONT_FOLLOW);
    if (wd < 0) return false;
    watches_[wd] = dir;
    std::vector<std::string> names;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (!Ignored(name)) names.push_back(std::move(name));
    }
    for (const std::string& name : names) Examine(absl::StrCat(dir, "/", name));
    return true;
  }

  void Examine(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) return;  // already gone; its removal event follows
    if (S_ISDIR(st.st_mode)) {
      WatchTree(path);
    } else if (S_ISSOCK(st.st_mode)) {
      auto it = desired_.find(path);
      if (it != desired_.end() && SameFile(it->second.st, st)) return;
      desired_[path] = DesiredSocket{++next_seq_, st};
    }
  }

  void Forget(const std::string& path, bool is_dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    desired_.erase(path);
    if (!is_dir) return;
    const std::string prefix = path + "/";
    for (auto it = desired_.lower_bound(prefix);
         it != desired_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      it = desired_.erase(it);
    }
  }

  void ReadEvents() {
    alignas(struct inotify_event) char buf[16384];
    for (;;) {
      ssize_t n = read(inotify_fd_, buf, sizeof(buf));
      if (n <= 0) return;
      absl::MutexLock lock(&mu_);
      for (char* p = buf; p < buf + n;) {
        const auto* ev = reinterpret_cast<const struct inotify_event*>(p);
        p += sizeof(struct inotify_event) + ev->len;
        HandleEvent(*ev);
      }
    }
  }

  void HandleEvent(const struct inotify_event& ev) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ev.mask & IN_Q_OVERFLOW) {
      Rescan();
      return;
    }
    if (ev.mask & IN_IGNORED) {
      watches_.erase(ev.wd);
      return;
    }
    auto w = watches_.find(ev.wd);
    if (w == watches_.end() || ev.len == 0) return;
    const std::string name = ev.name;
    if (Ignored(name)) return;
    const std::string path = absl::StrCat(w->second, "/", name);
    if (ev.mask & (IN_CREATE | IN_MOVED_TO)) {
      Examine(path);
    } else if (ev.mask & (IN_DELETE | IN_MOVED_FROM)) {
      Forget(path, (ev.mask & IN_ISDIR) != 0);
    }
  }

  // After an event queue overflow: walk again and drop what is gone.
  void Rescan() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    AddLog("inotify queue overflow: rescanning " + registry_dir_);
    WatchTree(registry_dir_);
    for (auto it = desired_.begin(); it != desired_.end();) {
      struct stat st {};
      if (lstat(it->first.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
        it = desired_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void Run() {
    for (;;) {
      int timeout_ms;
      {
        absl::MutexLock lock(&mu_);
        if (stop_) break;
        timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(NextWakeup() - absl::Now()));
      }
      timeout_ms =
          std::clamp(timeout_ms, 1, static_cast<int>(absl::ToInt64Milliseconds(kLoopPeriod)));
      struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {event_fd_, POLLIN, 0}};
      poll(fds, 2, timeout_ms);
      if (fds[1].revents & POLLIN) {
        uint64_t v;
        [[maybe_unused]] ssize_t n = read(event_fd_, &v, sizeof(v));
      }
      if (fds[0].revents & POLLIN) ReadEvents();
      Reconcile();
    }
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [path, op] : ops_) threads.push_back(std::move(op.thread));
      ops_.clear();
      actual_.clear();
    }
    for (std::thread& t : threads) t.join();
  }

  absl::Time NextWakeup() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    absl::Time next = now + kLoopPeriod;
    // A retry time already past belongs to an operation that is running or starts right now.
    for (const auto& [path, b] : backoff_) {
      if (b.next > now) next = std::min(next, b.next);
    }
    return next;
  }

  // The kubelet's reconciler: deregister what is gone or replaced, start registering what is new
  // (one operation per socket path at a time, with backoff after failures).
  void Reconcile() {
    std::vector<std::thread> finished;
    {
      absl::MutexLock lock(&mu_);
      bool changed = false;
      for (auto it = actual_.begin(); it != actual_.end();) {
        auto d = desired_.find(it->first);
        if (d == desired_.end() || d->second.seq != it->second.seq) {
          const Registration& r = it->second.reg;
          AddLog(absl::StrCat("Deregistered driver=", r.driver, " endpoint=", r.endpoint,
                              " socket=", r.socket_path, " generation=", r.generation,
                              d == desired_.end() ? " (socket removed)" : " (socket re-created)"));
          it = actual_.erase(it);
          changed = true;
        } else {
          ++it;
        }
      }
      for (auto it = backoff_.begin(); it != backoff_.end();) {
        auto d = desired_.find(it->first);
        it = (d == desired_.end() || d->second.seq != it->second.seq) ? backoff_.erase(it)
                                                                      : std::next(it);
      }
      for (auto it = ops_.begin(); it != ops_.end();) {
        if (it->second.done->load()) {
          finished.push_back(std::move(it->second.thread));
          it = ops_.erase(it);
        } else {
          ++it;
        }
      }
      const absl::Time now = absl::Now();
      for (const auto& [socket, desired] : desired_) {
        if (actual_.count(socket) != 0 || ops_.count(socket) != 0) continue;
        if (auto b = backoff_.find(socket); b != backoff_.end() && now < b->second.next) continue;
        auto done = std::make_shared<std::atomic<bool>>(false);
        std::string path = socket;
        uint64_t seq = desired.seq;
        ops_[path] = Operation{std::thread([this, path, seq, done] {
                                 Attempt(path, seq);
                                 done->store(true);
                                 Wake();
                               }),
                               done};
      }
      if (changed) cv_.SignalAll();
    }
    for (std::thread& t : finished) t.join();
  }

  // True when the operation for (path, seq) is obsolete: the simulator stops, or the socket was
  // removed or replaced.
  bool Cancelled(const std::string& path, uint64_t seq) {
    absl::MutexLock lock(&mu_);
    auto d = desired_.find(path);
    return stop_ || d == desired_.end() || d->second.seq != seq;
  }

  absl::Status WaitConnected(grpc::Channel& channel, const std::string& target,
                             const std::string& path, uint64_t seq) {
    const absl::Time deadline = absl::Now() + kDialTimeout;
    grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
    while (state != GRPC_CHANNEL_READY) {
      if (Cancelled(path, seq)) return absl::CancelledError("socket removed or replaced");
      if (absl::Now() >= deadline) {
        return absl::UnavailableError(absl::StrCat("cannot connect to ", target, " within ",
                                                   absl::FormatDuration(kDialTimeout), " (state ",
                                                   StateName(state), ")"));
      }
      channel.WaitForStateChange(
          state, absl::ToChronoTime(std::min(deadline, absl::Now() + kCancelCheck)));
      state = channel.GetState(/*try_to_connect=*/true);
    }
    return absl::OkStatus();
  }

  grpc::Status Notify(reg::Registration::Stub& stub, const std::string& path, bool registered,
                      const std::string& error) {
    reg::RegistrationStatus req;
    req.set_plugin_registered(registered);
    req.set_error(error);
    reg::RegistrationStatusResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(kNotifyTimeout));
    grpc::Status s = stub.NotifyRegistrationStatus(&ctx, req, &resp);
    AddLog(absl::StrCat("NotifyRegistrationStatus ", path,
                        " registered=", registered ? "true" : "false", " error=", Quote(error),
                        " -> ", GrpcResult(s)));
    return s;
  }

  // One registration attempt for the socket (spec §3 steps 2–9).
  absl::StatusOr<Instance> Register(const std::string& path, uint64_t seq) {
    std::shared_ptr<grpc::Channel> reg_channel = Dial(path);
    if (absl::Status s = WaitConnected(*reg_channel, path, path, seq); !s.ok()) return s;
    auto stub = reg::Registration::NewStub(reg_channel);

    reg::PluginInfo info;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(Deadline(kGetInfoTimeout));
      grpc::Status s = stub->GetInfo(&ctx, reg::InfoRequest(), &info);
      if (!s.ok()) {
        AddLog(absl::StrCat("GetInfo ", path, " -> ", GrpcResult(s)));
        absl::Status st = FromGrpc(s);
        return absl::Status(st.code(), absl::StrCat("GetInfo: ", st.message()));
      }
      AddLog(absl::StrCat("GetInfo ", path, " -> OK type=", info.type(), " name=", info.name(),
                          " endpoint=", Quote(info.endpoint()), " supported_versions=[",
                          absl::StrJoin(info.supported_versions(), ", "), "]"));
    }

    auto reject = [&](const std::string& error) -> absl::Status {
      Notify(*stub, path, false, error);  // informational for the plugin; the attempt failed
      return absl::FailedPreconditionError(error);
    };
    if (info.type() != kDraPluginType) {
      return reject(absl::StrCat("no handler registered for plugin type: ", info.type(),
                                 " at socket path: ", path));
    }
    if (info.name().empty()) return reject("plugin validation failed: empty plugin name");
    std::string version;
    for (const std::string& v : info.supported_versions()) {
      if (std::find(opts_.known_versions.begin(), opts_.known_versions.end(), v) !=
          opts_.known_versions.end()) {
        version = v;
        break;
      }
    }
    if (version.empty()) {
      return reject(absl::StrCat(
          "no supported version among [", absl::StrJoin(info.supported_versions(), ", "),
          "] (this kubelet knows [", absl::StrJoin(opts_.known_versions, ", "), "])"));
    }
    if (opts_.reject_registration) {
      return reject("registration rejected by the kubelet simulator (reject_registration)");
    }
    const std::string endpoint = info.endpoint().empty() ? path : info.endpoint();
    std::shared_ptr<grpc::Channel> channel = Dial(endpoint);
    if (absl::Status s = WaitConnected(*channel, endpoint, path, seq); !s.ok()) {
      if (s.code() == absl::StatusCode::kCancelled) return s;
      return reject(absl::StrCat("plugin registration failed: ", s.message()));
    }
    if (grpc::Status s = Notify(*stub, path, true, ""); !s.ok()) {
      absl::Status st = FromGrpc(s);
      return absl::Status(st.code(), absl::StrCat("NotifyRegistrationStatus: ", st.message()));
    }
    Instance inst;
    inst.reg.driver = info.name();
    inst.reg.endpoint = endpoint;
    inst.reg.version = version;
    inst.reg.socket_path = path;
    inst.reg.supported_versions.assign(info.supported_versions().begin(),
                                       info.supported_versions().end());
    inst.seq = seq;
    inst.channel = std::move(channel);
    return inst;
  }

  void Attempt(const std::string& path, uint64_t seq) {
    absl::StatusOr<Instance> result = Register(path, seq);
    absl::MutexLock lock(&mu_);
    auto d = desired_.find(path);
    const bool current = !stop_ && d != desired_.end() && d->second.seq == seq;
    if (!current) {
      if (result.ok()) AddLog(absl::StrCat("Discarded registration of ", path, ": socket changed"));
      return;
    }
    if (result.ok()) {
      Instance& inst = *result;
      inst.reg.generation = ++generations_[inst.reg.driver];
      AddLog(absl::StrCat("Registered driver=", inst.reg.driver, " version=", inst.reg.version,
                          " endpoint=", inst.reg.endpoint, " socket=", path,
                          " generation=", inst.reg.generation));
      actual_[path] = std::move(inst);
      backoff_.erase(path);
      cv_.SignalAll();
      return;
    }
    Backoff& b = backoff_[path];
    if (b.seq != seq) b = Backoff{seq};
    b.delay =
        b.delay == absl::ZeroDuration() ? kInitialBackoff : std::min(2 * b.delay, kMaxBackoff);
    b.next = absl::Now() + b.delay;
    b.last_error = std::string(result.status().message());
    AddLog(absl::StrCat("Registration of ", path, " failed: ", result.status().ToString(),
                        "; retry in ", absl::FormatDuration(b.delay)));
  }

  const KubeletSimOptions opts_;
  std::string registry_dir_;
  int inotify_fd_ = -1;
  int event_fd_ = -1;
  std::thread thread_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled on every registration and deregistration
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, std::string> watches_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, DesiredSocket> desired_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Instance> actual_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Backoff> backoff_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Operation> ops_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> generations_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

absl::StatusOr<std::unique_ptr<KubeletSimulator>> KubeletSimulator::Start(KubeletSimOptions opts) {
  if (opts.root_dir.empty()) return absl::InvalidArgumentError("kubelet sim: empty root_dir");
  for (const std::string& v : opts.known_versions) {
    if (v != kV1 && v != kV1beta1) {
      return absl::InvalidArgumentError(absl::StrCat("kubelet sim: unknown version ", Quote(v),
                                                     " in known_versions (can call ", kV1, ", ",
                                                     kV1beta1, ")"));
    }
  }
  auto impl = std::make_unique<Impl>(std::move(opts));
  if (absl::Status s = impl->Init(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("kubelet sim: ", s.message()));
  }
  return std::unique_ptr<KubeletSimulator>(new KubeletSimulator(std::move(impl)));
}

KubeletSimulator::KubeletSimulator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KubeletSimulator::~KubeletSimulator() = default;

absl::StatusOr<Registration> KubeletSimulator::WaitForRegistration(const std::string& driver,
                                                                   int min_generation,
                                                                   absl::Duration timeout) {
  return impl_->WaitForRegistration(driver, min_generation, timeout);
}

std::optional<Registration> KubeletSimulator::Find(const std::string& driver) const {
  return impl_->Find(driver);
}

bool KubeletSimulator::WaitForDeregistration(const std::string& driver, absl::Duration timeout) {
  return impl_->WaitForDeregistration(driver, timeout);
}

absl::StatusOr<std::map<std::string, ClaimResult>> KubeletSimulator::Prepare(
    const std::string& driver, const std::vector<PrepareClaim>& claims) {
  return impl_->Prepare(driver, claims);
}

absl::StatusOr<std::map<std::string, std::string>> KubeletSimulator::Unprepare(
    const std::string& driver, const std::vector<PrepareClaim>& claims) {
  return impl_->Unprepare(driver, claims);
}

std::vector<std::string> KubeletSimulator::Log() const { return impl_->Log(); }

}  // namespace topodra::testing
