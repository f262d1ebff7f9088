// What rank 0 prints before any work: the three things the debugging advice of the guide checks
// first (the distributed context, the launcher's world, the engine), plus threads, device and
// library versions; the communication check; and the run's plan (batch sizes, steps).
#pragma once

#include <string>

#include "lft/build_config.h"
#include "lft/config/config.h"
#include <string>
#include <vector>

#include "lft/engine/registry.h"
#include "lft/mesh/device_mesh.h"
#include "lft/model/model_config.h"
#include "lft/runtime/device.h"
#include "lft/runtime/runtime.h"

namespace lft::app {

std::string startup_report(const Runtime& rt, const config::Config& cfg,
                           const engine::EngineInfo& engine, const MeshShape& shape, int threads,
                           const DeviceChoice& device);

// The start-up log's lines of which GPU each rank drives (names with UUIDs, by rank).
std::string gpu_binding_report(const std::vector<std::string>& device_names);

// Collective: an all-reduce over the world and over every mesh group whose result each rank can
// predict from its coordinates. A wrong sum is a one-rank error (the rank that sees it aborts).
std::string check_communication(MpiCommunicator& world, DeviceMesh& mesh);

}  // namespace lft::app
