// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI 1.0, all of it. (The task team, a private extension of the cpu backend, is
 * not part of it: kiln/private/task_team.h, not installed.) */
#ifndef KILN_C_KILN_H_
#define KILN_C_KILN_H_

#include "kiln/c/abi.h"
#include "kiln/c/collector.h"
#include "kiln/c/device.h"
#include "kiln/c/host.h"
#include "kiln/c/kernel.h"
#include "kiln/c/module.h"
#include "kiln/c/plugin.h"

#endif /* KILN_C_KILN_H_ */
