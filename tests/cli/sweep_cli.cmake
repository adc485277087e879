# SPDX-License-Identifier: Apache-2.0
# Sweeps (issue 21 item 5) and return-value checks (item 6) through `kiln run`; included from
# tests/cli/CMakeLists.txt (kiln_cli_test, ${runs}).
set(sweeps ${CMAKE_CURRENT_SOURCE_DIR}/sweep)
set(vm_dir ${CMAKE_CURRENT_SOURCE_DIR}/vm)
# The cross product: one table, every point named apart, the noise verdict and throughput per row.
kiln_cli_test(run_sweep 0 "sweep: .*sweep_relu.yaml: 6 points \\(3 shape x 2 number\\).*#  point .*benchmark .*median .*CV .*RSE .*noise .*GB/s .*GFLOP/s .*timer .*status.*1  shape=\\[4096\\], number=1  .*relu/4096/float32/cpu:0/number=1 .*(ok|noisy) .*6  shape=\\[1024, 1024\\], number=10 .*relu/1048576/float32/cpu:0/number=10 .*6 of 6 points ok" run ${runs}/sweep_relu.yaml)
# Failing points are reported in the table and beneath it (an error several points share, once,
# naming them), and the others run; the exit code is the largest of the points' (3: a point
# failed to run; 2: a point's config is invalid).
kiln_cli_test(run_sweep_partial_failure 3 "1  dtype=float32, shape=\\[256\\] .*relu/256/float32/cpu:0 .*ok.*3  dtype=float64, shape=\\[256\\] .*relu/256/float64/cpu:0 .*error \\(exit 3\\).*5  dtype=flaot16, shape=\\[256\\] .*invalid \\(exit 2\\).*points 3, 4: relu: in has dtype float64, expected float32.*points 5, 6: [^ ]*partial.yaml:10:29: inputs\\[0\\].dtype: unknown dtype 'flaot16'.*2 of 6 points ok; failed: 3, 4, 5, 6 \\(exit 3\\)" run ${sweeps}/partial.yaml)
kiln_cli_test(run_sweep_bad_parameter 2 "bad_param.yaml:7:3: sweep.devcie: 'devcie' is not a parameter \\(did you mean 'device'\\?\\)" run ${sweeps}/bad_param.yaml)
# The device each point ran on is the one it names; two names of one device stay two points.
kiln_cli_test(run_sweep_devices 0 "relu/256/float32/cpu:0/device=cpu .*relu/256/float32/cpu:0/device=cpu:0 .*2 of 2 points ok" run ${sweeps}/devices.yaml)
kiln_cli_test(run_sweep_device_option 2 "--device cpu: .*devices.yaml sweeps the device" run --device cpu ${sweeps}/devices.yaml)
kiln_cli_test(profile_sweep 2 "sweep: this configuration is a sweep of several runs" profile ${runs}/sweep_relu.yaml)
# A VM function's return value: shown, checked against values and .npy files, in the JSON.
kiln_cli_test(run_result_tuple 0 "returned: +result\\[0\\] +3 +result\\[1\\]\\[0\\] +float32\\[4\\] min=0 max=3 .*result\\[1\\]\\[1\\] +7 .*checks: +result\\[0\\]: ok \\(got 3, expected 3 within rtol=1e-05 atol=1e-08\\) +result\\[1\\]\\[0\\]: ok \\(4 elements match '[^']*x.npy' within rtol=0 atol=0; max abs diff 0\\)" run ${vm_dir}/returns.yaml)
kiln_cli_test(run_result_mismatch 1 "result\\[1\\]: differs \\(got 3, expected 4 at rtol=1e-05 atol=1e-08\\)" run ${vm_dir}/returns_mismatch.yaml)
kiln_cli_test(run_result_json 0 "\"result\": {.*\"tuple\": \\[.*\"value\": 3.*\"dtype\": \"float32\"" run --json ${vm_dir}/returns.yaml)
kiln_cli_test(run_result_vm_mlp 0 "returned: +result +float32\\[64, 64\\]" run ${runs}/vm_mlp.yaml)
# One JSON document and one Google Benchmark file for the whole sweep; kiln compare reads two
# of them point by point and fails on a point that broke.
if(Python3_Interpreter_FOUND)
  add_test(NAME cli.sweep_json_compare
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/sweep_test.py
      $<TARGET_FILE:kiln_tool> ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/examples/kernels)
  set_tests_properties(cli.sweep_json_compare PROPERTIES TIMEOUT 300)
endif()
# One progress display for the whole sweep: each line says the point, the sweep's time and ETA.
# In kiln's process (--isolation none) the repeats are followed; in a worker (a sweep's
# default) one line per point says what is timed there.
kiln_cli_test(run_sweep_progress 0 "\\[kiln\\] point 1/6 \\(shape=\\[4096\\], number=1\\), [0-9.]+ m?s into the sweep: timing relu: repeat .*\\[kiln\\] point 2/6 \\(shape=\\[4096\\], number=10\\), [0-9.]+ m?s into the sweep, sweep ETA [0-9.]+ m?s: timing relu: repeat [0-9]+/5" run --progress --isolation none ${runs}/sweep_relu.yaml)
kiln_cli_test(run_sweep_progress_isolated 0 "\\[kiln\\] point 1/6 \\(shape=\\[4096\\], number=1\\), [0-9.]+ m?s into the sweep: timing relu in a worker process \\(its repeats are not followed from here\\).*\\[kiln\\] point 2/6 \\(shape=\\[4096\\], number=10\\), [0-9.]+ m?s into the sweep, sweep ETA [0-9.]+ m?s: timing relu in a worker process" run --progress ${runs}/sweep_relu.yaml)
