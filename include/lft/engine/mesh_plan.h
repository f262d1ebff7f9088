// Turns the [mesh] table into a MeshShape for a given engine and world size, or a ConfigError
// that names the keys, their locations and both numbers when they cannot fit.
#pragma once

#include "lft/config/config.h"
#include "lft/engine/registry.h"
#include "lft/mesh/device_mesh.h"

namespace lft::engine {

// Unset dims are 1, except the engine's fill dim, which takes what is left of the world when no
// dim is -1. One dim may be -1 (fill). The product must equal world_size.
MeshShape plan_mesh(const config::Config& cfg, const EngineInfo& engine, int world_size);

}  // namespace lft::engine
