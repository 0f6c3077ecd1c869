// The two DRA resource health API versions as type bundles, so one template serves (or reads)
// both: v1 and v1alpha1 are the same messages under another package. Shared by the daemon's
// health service and the kubelet simulator.
#pragma once

#include "proto/drahealth/v1/api.grpc.pb.h"
#include "proto/drahealth/v1alpha1/api.grpc.pb.h"

namespace topodra::proto {

struct HealthV1 {
  using Service = ::v1::DRAResourceHealth;
  using Request = ::v1::NodeWatchResourcesRequest;
  using Response = ::v1::NodeWatchResourcesResponse;
  using DeviceHealth = ::v1::DeviceHealth;
  static constexpr auto kHealthy = ::v1::HEALTHY;
  static constexpr auto kUnhealthy = ::v1::UNHEALTHY;
  static constexpr auto kUnknown = ::v1::UNKNOWN;
  static constexpr char kVersion[] = "v1.DRAResourceHealth";
};

struct HealthV1alpha1 {
  using Service = ::v1alpha1::DRAResourceHealth;
  using Request = ::v1alpha1::NodeWatchResourcesRequest;
  using Response = ::v1alpha1::NodeWatchResourcesResponse;
  using DeviceHealth = ::v1alpha1::DeviceHealth;
  static constexpr auto kHealthy = ::v1alpha1::HEALTHY;
  static constexpr auto kUnhealthy = ::v1alpha1::UNHEALTHY;
  static constexpr auto kUnknown = ::v1alpha1::UNKNOWN;
  static constexpr char kVersion[] = "v1alpha1.DRAResourceHealth";
};

}  // namespace topodra::proto
