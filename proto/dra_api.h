// The two DRA kubelet plugin API versions as type bundles, so one template serves (or calls)
// both: their messages are the same except Device.share_id, which only v1 has. Shared by the
// daemon's services and the kubelet simulator.
#pragma once

#include "proto/dra/v1/api.grpc.pb.h"
#include "proto/dra/v1beta1/api.grpc.pb.h"

namespace topodra::proto {

struct DraV1 {
  using DRAPlugin = ::k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin;
  using NodePrepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesResponse;
  using NodePrepareResourceResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourceResponse;
  using NodeUnprepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1::NodeUnprepareResourcesResponse;
  using Device = ::k8s::io::kubelet::pkg::apis::dra::v1::Device;
  static constexpr char kVersion[] = "v1.DRAPlugin";
  static constexpr bool kHasShareId = true;
};

struct DraV1beta1 {
  using DRAPlugin = ::k8s::io::kubelet::pkg::apis::dra::v1beta1::DRAPlugin;
  using NodePrepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesRequest;
  using NodePrepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourcesResponse;
  using NodePrepareResourceResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodePrepareResourceResponse;
  using NodeUnprepareResourcesRequest =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesRequest;
  using NodeUnprepareResourcesResponse =
      ::k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesResponse;
  using Device = ::k8s::io::kubelet::pkg::apis::dra::v1beta1::Device;
  static constexpr char kVersion[] = "v1beta1.DRAPlugin";
  static constexpr bool kHasShareId = false;
};

}  // namespace topodra::proto
