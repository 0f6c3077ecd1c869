#include "driver/cgroup/cgroupfs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"

namespace topodra::cgroup {
namespace {

// A list of 65536 alternate CPUs ("0,2,4,...") is under 200 KiB; the kernel never writes more.
constexpr size_t kMaxCpusFileBytes = size_t{256} * 1024;
constexpr size_t kMaxControllersFileBytes = 4096;
// kubepods/qos/pod/container is 4; anything deeper that is not below a container is not a
// layout we know, and the cap keeps a pathological tree from costing unbounded walks.
constexpr int kMaxDepth = 8;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool ListsCpuset(absl::string_view list, const char* delimiters) {
  for (absl::string_view part : absl::StrSplit(list, absl::ByAnyChar(delimiters))) {
    if (part == "cpuset") return true;
  }
  return false;
}

std::string Normalized(const std::string& dir) {
  std::string out = std::filesystem::absolute(dir).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

int Depth(std::string_view relative_path) {
  return static_cast<int>(std::count(relative_path.begin(), relative_path.end(), '/')) + 1;
}

class RealCgroupFs : public CgroupFs {
 public:
  explicit RealCgroupFs(Hierarchy hierarchy) : h_(std::move(hierarchy)) {}

  absl::StatusOr<std::vector<Observed>> Scan(bool mems) override {
    std::vector<Observed> out;
    for (const char* root : kKubepodsRoots) {
      if (absl::Status st = Walk(root, mems, out); !st.ok()) return st;
    }
    return out;
  }

  absl::Status Write(const std::string& relative_path, CpusetFile which,
                     const CpuSet& ids) override {
    const std::string text = ids.ToString();
    const char* what = which == CpusetFile::kMems ? "mems" : "cpus";
    if (relative_path.empty() || relative_path.front() == '/' ||
        absl::StrContains(relative_path, "..")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "write ", what, " \"", text, "\": invalid cgroup path \"", relative_path, "\""));
    }
    const std::string file = absl::StrCat(h_.root, "/", relative_path, "/", FileName(which));
    const std::string op = absl::StrCat("write ", what, " \"", text, "\" to");
    // No O_CREAT: a cgroup's files exist exactly as long as the cgroup, so a missing file is a
    // cgroup removed meanwhile (NotFound), never something to create.
    const int fd = ::open(file.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) return files::ErrnoStatus(errno, op, file);
    // One write(2): the kernel parses each write as a whole list, so the text cannot be split.
    const std::string line = text + "\n";
    ssize_t n;
    do {
      n = ::write(fd, line.data(), line.size());
    } while (n < 0 && errno == EINTR);
    const int write_errno = errno;
    const int close_rc = ::close(fd);
    const int close_errno = errno;
    if (n < 0) return files::ErrnoStatus(write_errno, op, file);
    if (static_cast<size_t>(n) != line.size()) {
      return absl::DataLossError(
          absl::StrCat(op, " \"", file, "\": short write (", n, " of ", line.size(), " bytes)"));
    }
    if (close_rc != 0) return files::ErrnoStatus(close_errno, op, file);
    return absl::OkStatus();
  }

 private:
  static constexpr const char* kKubepodsRoots[] = {"kubepods.slice", "kubepods"};

  // A cgroup's cpuset.mems, or nullopt when it cannot be read or parsed: Plan then leaves its
  // mems alone (a v2 cgroup without the cpuset controller has no cpuset.cpus either and is not
  // scanned at all).
  std::optional<CpuSet> ReadMems(const std::string& relative) {
    const std::string file = absl::StrCat(h_.root, "/", relative, "/cpuset.mems");
    absl::StatusOr<std::string> text =
        files::ReadFileBounded(file, kMaxCpusFileBytes, files::Links::kFollow);
    if (!text.ok() || text->size() > kMaxCpusFileBytes) return std::nullopt;
    absl::StatusOr<CpuSet> mems = CpuSet::Parse(*text);
    if (!mems.ok()) return std::nullopt;
    return *std::move(mems);
  }

  // Pre-order, children by name: parents come before their children and the order is stable.
  absl::Status Walk(const std::string& relative, bool mems, std::vector<Observed>& out) {
    if (std::optional<Node> node = Classify(relative)) {
      const std::string file = absl::StrCat(h_.root, "/", relative, "/cpuset.cpus");
      absl::StatusOr<std::string> text =
          files::ReadFileBounded(file, kMaxCpusFileBytes, files::Links::kFollow);
      if (absl::IsNotFound(text.status())) {
        // The cgroup went away (ENOENT, or ENODEV on a removed cgroup's file), or on v2 its
        // cpuset controller is not enabled: either way there is nothing to set. Its children
        // (if it still exists) are still looked at below.
      } else if (!text.ok()) {
        return text.status();
      } else if (text->size() > kMaxCpusFileBytes) {
        return absl::OutOfRangeError(
            absl::StrCat("\"", file, "\" holds more than ", kMaxCpusFileBytes, " bytes"));
      } else {
        absl::StatusOr<CpuSet> cpus = CpuSet::Parse(*text);
        if (!cpus.ok()) {
          return absl::Status(cpus.status().code(),
                              absl::StrCat("\"", file, "\": ", cpus.status().message()));
        }
        out.push_back({*std::move(node), *std::move(cpus),
                       mems ? ReadMems(relative) : std::optional<CpuSet>()});
      }
    }
    if (!DescendsInto(relative)) return absl::OkStatus();
    const std::string dir = absl::StrCat(h_.root, "/", relative);
    // A directory that vanished lists as empty.
    absl::StatusOr<std::vector<files::DirEntry>> entries = files::ListDirectory(dir);
    if (absl::IsFailedPrecondition(entries.status())) return absl::OkStatus();  // ENOTDIR
    if (!entries.ok()) return entries.status();
    std::vector<std::string> children;
    for (const files::DirEntry& e : *entries) {
      // cgroupfs holds directories (cgroups) and regular files (interface files), nothing else.
      if (!e.regular) children.push_back(absl::StrCat(relative, "/", e.name));
    }
    std::sort(children.begin(), children.end());
    for (const std::string& child : children) {
      if (absl::Status st = Walk(child, mems, out); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

  const Hierarchy h_;
};

}  // namespace

bool DescendsInto(std::string_view relative_path) {
  if (relative_path.empty() || Depth(relative_path) > kMaxDepth) return false;
  const std::string_view first = relative_path.substr(0, relative_path.find('/'));
  if (first != "kubepods.slice" && first != "kubepods") return false;
  // A container is looked into (crun's "container" subgroup of a systemd scope is the same
  // container), what is inside a container's children is not.
  const size_t slash = relative_path.rfind('/');
  if (slash == std::string_view::npos) return true;
  const std::optional<Node> parent = Classify(relative_path.substr(0, slash));
  return !parent.has_value() || parent->level != Level::kContainer;
}

absl::StatusOr<Hierarchy> FindHierarchy(const std::string& cgroup_root) {
  const std::string root = Normalized(cgroup_root);
  const std::string controllers_file = root + "/cgroup.controllers";
  absl::StatusOr<std::string> controllers =
      files::ReadFileBounded(controllers_file, kMaxControllersFileBytes, files::Links::kFollow);
  if (controllers.ok() && ListsCpuset(*controllers, " \n")) {
    return Hierarchy{Version::kV2, root};
  }
  // v1: the cpuset controller's own mount, alone ("cpuset") or co-mounted ("cpu,cpuset").
  // cpuset.cpus must be there: an empty directory is a mount point with nothing mounted on it.
  if (IsDirectory(root + "/cpuset") && Exists(root + "/cpuset/cpuset.cpus")) {
    return Hierarchy{Version::kV1, root + "/cpuset"};
  }
  absl::StatusOr<std::vector<files::DirEntry>> entries = files::ListDirectory(root);
  if (entries.ok()) {
    std::vector<std::string> names;
    for (const files::DirEntry& e : *entries) {
      if (!e.regular && ListsCpuset(e.name, ",")) names.push_back(e.name);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string dir = absl::StrCat(root, "/", name);
      if (IsDirectory(dir) && Exists(dir + "/cpuset.cpus")) return Hierarchy{Version::kV1, dir};
    }
  }
  // cgroup_root may be the v1 cpuset mount itself (v2's root cgroup has no cpuset.cpus).
  if (!controllers.ok() && Exists(root + "/cpuset.cpus")) return Hierarchy{Version::kV1, root};
  return absl::NotFoundError(absl::StrCat(
      "no cpuset controller under \"", root, "\": \"", controllers_file, "\" ",
      controllers.ok() ? "does not list cpuset"
                       : absl::StrCat("cannot be read (", controllers.status().message(), ")"),
      ", and there is no \"cpuset\" directory (or one named like \"cpu,cpuset\") holding "
      "cpuset.cpus"));
}

absl::StatusOr<CpuSet> RootMems(const Hierarchy& hierarchy) {
  const std::string file =
      absl::StrCat(hierarchy.root,
                   hierarchy.version == Version::kV2 ? "/cpuset.mems.effective" : "/cpuset.mems");
  absl::StatusOr<std::string> text =
      files::ReadFileBounded(file, kMaxCpusFileBytes, files::Links::kFollow);
  if (!text.ok()) return text.status();
  absl::StatusOr<CpuSet> mems = CpuSet::Parse(*text);
  if (!mems.ok()) {
    return absl::Status(mems.status().code(),
                        absl::StrCat("\"", file, "\": ", mems.status().message()));
  }
  if (mems->Empty()) return absl::FailedPreconditionError(absl::StrCat("\"", file, "\" is empty"));
  return mems;
}

std::unique_ptr<CgroupFs> NewCgroupFs(Hierarchy hierarchy) {
  return std::make_unique<RealCgroupFs>(std::move(hierarchy));
}

}  // namespace topodra::cgroup
