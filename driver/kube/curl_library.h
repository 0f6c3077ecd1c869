// libcurl, loaded at run time. Only the daemon talks to the API server: linking libcurl into the
// binary would load it and its ~40 dependencies (TLS, Kerberos, LDAP, ...) into every CLI run.
// The headers are still used for types and constants; the functions come from dlopen/dlsym.
#ifndef TOPODRA_DRIVER_KUBE_CURL_LIBRARY_H_
#define TOPODRA_DRIVER_KUBE_CURL_LIBRARY_H_

#include <curl/curl.h>

#include "absl/status/statusor.h"

namespace topodra::kube {

// The libcurl functions the REST client uses.
struct CurlLibrary {
  decltype(&curl_global_init) global_init;
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_cleanup) easy_cleanup;
  decltype(&curl_easy_setopt) easy_setopt;
  decltype(&curl_easy_getinfo) easy_getinfo;
  decltype(&curl_easy_strerror) easy_strerror;
  decltype(&curl_multi_init) multi_init;
  decltype(&curl_multi_cleanup) multi_cleanup;
  decltype(&curl_multi_add_handle) multi_add_handle;
  decltype(&curl_multi_remove_handle) multi_remove_handle;
  decltype(&curl_multi_perform) multi_perform;
  decltype(&curl_multi_poll) multi_poll;
  decltype(&curl_multi_info_read) multi_info_read;
  decltype(&curl_multi_strerror) multi_strerror;
  decltype(&curl_slist_append) slist_append;
  decltype(&curl_slist_free_all) slist_free_all;
  decltype(&curl_share_init) share_init;
  decltype(&curl_share_setopt) share_setopt;
  decltype(&curl_share_cleanup) share_cleanup;
};

// Loads libcurl.so.4 and resolves every CurlLibrary function, then calls curl_global_init, all
// once per process (thread-safe); later calls return the same library or the same error. The
// library is never unloaded nor cleaned up.
absl::StatusOr<const CurlLibrary*> LoadCurlLibrary();

}  // namespace topodra::kube

#endif  // TOPODRA_DRIVER_KUBE_CURL_LIBRARY_H_
