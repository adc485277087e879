# SPDX-License-Identifier: Apache-2.0
# `kiln vm asm|disasm|stats` (docs/vm.md): a canonical text program assembles, disassembles
# back to the same text and reports its statistics; malformed programs and executables fail
# with their exit code and a message that says what and where.
set(vm_src ${CMAKE_CURRENT_SOURCE_DIR}/vm)
set(vm_out ${CMAKE_CURRENT_BINARY_DIR}/vm)
file(MAKE_DIRECTORY ${vm_out})

kiln_cli_test(vm_asm 0 "wrote .*mlp.kvm: [0-9]+ bytes, 6 functions, 7 constants, 11 instructions"
  vm asm ${vm_src}/mlp.kvmt -o ${vm_out}/mlp.kvm)
set_tests_properties(cli.vm_asm PROPERTIES FIXTURES_SETUP kiln_vm_mlp)
kiln_cli_test(vm_disasm 0 "func @main\\(x\\) regs=5 {.*  call  matmul           in: %0, c\\[0\\], %2 dst: %void"
  vm disasm ${vm_out}/mlp.kvm)
kiln_cli_test(vm_stats 0
  "Kiln VM executable statistics: +Constant pool \\(# 7\\): \\[\\[2, 2\\], shapetuple\\[2, 2\\], float32, cpu:0, \"global\", 0.5, 36028797018963968\\] +Globals \\(#6\\): \\[vm.builtin.alloc_storage, vm.builtin.alloc_tensor, matmul, relu, main, helper\\]"
  vm stats ${vm_out}/mlp.kvm)
set_tests_properties(cli.vm_disasm cli.vm_stats PROPERTIES FIXTURES_REQUIRED kiln_vm_mlp)
add_test(NAME cli.vm_roundtrip
  COMMAND ${CMAKE_COMMAND} -DKILN=$<TARGET_FILE:kiln_tool> -DSRC=${vm_src}/mlp.kvmt
    -DOUT=${vm_out}/roundtrip -P ${vm_src}/roundtrip.cmake)
set_tests_properties(cli.vm_roundtrip PROPERTIES TIMEOUT 120)

kiln_cli_test(vm_asm_unknown_mnemonic 2
  "bad_mnemonic.kvmt:7:3: unknown instruction 'jump' \\(expected call, ret, goto or if\\)"
  vm asm ${vm_src}/bad_mnemonic.kvmt -o ${vm_out}/bad.kvm)
kiln_cli_test(vm_asm_missing_brace 2
  "missing_brace.kvmt:5:1: missing '}' to close function main opened at 3:1"
  vm asm ${vm_src}/missing_brace.kvmt -o ${vm_out}/bad.kvm)
kiln_cli_test(vm_asm_missing_output 2 "--output is required" vm asm ${vm_src}/mlp.kvmt)
kiln_cli_test(vm_disasm_garbage 3
  "garbage.kvm: invalid VM executable: header at byte offset 0: bad magic"
  vm disasm ${vm_src}/garbage.kvm)
kiln_cli_test(vm_stats_truncated 3
  "truncated.kvm: invalid VM executable: [a-z]+ section at byte offset [0-9]+: truncated"
  vm stats ${vm_src}/truncated.kvm)
kiln_cli_test(vm_missing_file 2 "cannot read .*does_not_exist.kvm"
  vm disasm ${vm_src}/does_not_exist.kvm)
kiln_cli_test(vm_no_command 2 "A subcommand is required" vm)
