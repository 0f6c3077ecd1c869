// The device nodes a container needs to use a GPU, found on the host: the DRM nodes of the PCI
// device (/dev/dri/cardN, /dev/dri/renderDN) and, for NVIDIA's driver, /dev/nvidiaN plus the
// driver's control nodes. Only existing nodes are returned, so a GPU without a loaded driver
// simply has none.
#pragma once

#include <string>
#include <vector>

#include "cdi/spec.h"
#include "topology/topology.h"

namespace topodra::prepare {

// host_root is "/" on a node, a fake tree in tests. Paths in the result are the paths inside
// the container (/dev/...); hostPath is set only when host_root is not "/".
std::vector<cdi::DeviceNode> GpuDeviceNodes(const topology::Gpu& gpu,
                                            const std::string& host_root = "/");

}  // namespace topodra::prepare
