// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI, all of it. */
#ifndef KILN_C_KILN_H_
#define KILN_C_KILN_H_

#include "kiln/c/abi.h"
#include "kiln/c/collector.h"
#include "kiln/c/device.h"
#include "kiln/c/host.h"
#include "kiln/c/kernel.h"
#include "kiln/c/module.h"
#include "kiln/c/plugin.h"
#include "kiln/c/task_team.h"

#endif /* KILN_C_KILN_H_ */
