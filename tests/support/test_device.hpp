// The device a test binary runs its device-parameterised tests on (--device=cpu|cuda).
#pragma once
#include "flexkit/device.hpp"

namespace flexkit::test {

Device device();

}  // namespace flexkit::test
