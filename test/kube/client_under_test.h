// The RestClient implementation the client tests (rest_client_test, watch_test, tls_test) run
// against.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "driver/kube/rest_client.h"

namespace topodra::kube {

inline absl::StatusOr<std::unique_ptr<RestClient>> NewClientUnderTest(const ClusterConfig& config) {
#ifdef TOPODRA_TEST_CURL_CLIENT
  return NewCurlRestClient(config);
#else
  return NewHttpRestClient(config);
#endif
}

}  // namespace topodra::kube
