#include "driver/kube/curl_library.h"

#include <dlfcn.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace topodra::kube {
namespace {

constexpr char kLibrary[] = "libcurl.so.4";

std::string DlErrorText() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown error";
}

// Sets `fn` to the symbol `name` of `handle`.
template <typename Fn>
absl::Status Resolve(void* handle, const char* name, Fn& fn) {
  dlerror();  // clear a stale error
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load ", kLibrary, ": missing symbol ", name, ": ", DlErrorText()));
  }
  fn = reinterpret_cast<Fn>(symbol);
  return absl::OkStatus();
}

absl::StatusOr<CurlLibrary> Load() {
  // Never dlclosed: handles and global state outlive any one client.
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load ", kLibrary, " (install the libcurl4 package): ", DlErrorText()));
  }
  CurlLibrary lib{};
  for (absl::Status s : {
           Resolve(handle, "curl_global_init", lib.global_init),
           Resolve(handle, "curl_easy_init", lib.easy_init),
           Resolve(handle, "curl_easy_cleanup", lib.easy_cleanup),
           Resolve(handle, "curl_easy_setopt", lib.easy_setopt),
           Resolve(handle, "curl_easy_getinfo", lib.easy_getinfo),
           Resolve(handle, "curl_easy_strerror", lib.easy_strerror),
           Resolve(handle, "curl_multi_init", lib.multi_init),
           Resolve(handle, "curl_multi_cleanup", lib.multi_cleanup),
           Resolve(handle, "curl_multi_add_handle", lib.multi_add_handle),
           Resolve(handle, "curl_multi_remove_handle", lib.multi_remove_handle),
           Resolve(handle, "curl_multi_perform", lib.multi_perform),
           Resolve(handle, "curl_multi_poll", lib.multi_poll),
           Resolve(handle, "curl_multi_info_read", lib.multi_info_read),
           Resolve(handle, "curl_multi_strerror", lib.multi_strerror),
           Resolve(handle, "curl_slist_append", lib.slist_append),
           Resolve(handle, "curl_slist_free_all", lib.slist_free_all),
           Resolve(handle, "curl_share_init", lib.share_init),
           Resolve(handle, "curl_share_setopt", lib.share_setopt),
           Resolve(handle, "curl_share_cleanup", lib.share_cleanup),
       }) {
    if (!s.ok()) return s;
  }
  // libcurl is never cleaned up (other users may remain).
  if (const CURLcode init = lib.global_init(CURL_GLOBAL_DEFAULT); init != CURLE_OK) {
    return absl::InternalError(absl::StrCat("curl_global_init: ", lib.easy_strerror(init)));
  }
  return lib;
}

}  // namespace

absl::StatusOr<const CurlLibrary*> LoadCurlLibrary() {
  // Thread-safe one-time initialization.
  static const absl::StatusOr<CurlLibrary>* const library = new absl::StatusOr<CurlLibrary>(Load());
  if (!library->ok()) return library->status();
  return &**library;
}

}  // namespace topodra::kube
