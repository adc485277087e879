// The Kiln C++ API, all of it.
#ifndef KILN_KILN_H_
#define KILN_KILN_H_

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/device_backend.h"
#include "kiln/device_code.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/evaluator.h"
#include "kiln/function.h"
#include "kiln/logging.h"
#include "kiln/module.h"
#include "kiln/npy.h"
#include "kiln/object.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"
#include "kiln/runtime.h"
#include "kiln/temp_dir.h"
#include "kiln/tensor.h"
#include "kiln/testing.h"
#include "kiln/version.h"

#endif  // KILN_KILN_H_
