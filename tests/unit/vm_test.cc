// SPDX-License-Identifier: Apache-2.0
// The VirtualMachine: SPEC.md §2.17's checklist and the state rules and errors of §2.9–§2.14,
// on executables built with ExecBuilder, plus the VM as a module (tar round trip, local_run).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/profiling/report.h"
#include "kiln/vm/exec_builder.h"
#include "kiln/vm/virtual_machine.h"
#include "test_util.h"

namespace kiln::vm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Test functions the programs below call, registered once.
const bool registered = [] {
  registry::set("test.vm.add",
                Function::from_packed("test.vm.add",
                                      [](const Any* a, int32_t n) {
                                        int64_t sum = 0;
                                        for (int32_t i = 0; i < n; ++i) sum += a[i].cast<int64_t>();
                                        return Any(sum);
                                      }),
                true);
  registry::set("test.vm.fail",
                Function::from_packed(
                    "test.vm.fail",
                    [](const Any*, int32_t) -> Any { throw ValueError("deliberate failure"); }),
                true);
  registry::set(
      "test.vm.identity",
      Function::from_packed("test.vm.identity", [](const Any* a, int32_t) { return a[0]; }), true);
  return true;
}();

using B = ExecBuilder;

// func0(r0, r1): r2 = test.vm.add(r0, r1); ret r2
Executable add_program() {
  B b;
  b.emit_function("func0", 2, {"x", "y"});
  b.emit_call("test.vm.add", {B::r(0), B::r(1)}, 2);
  b.emit_ret(B::r(2));
  b.end_function("func0");
  return b.get();
}

VirtualMachine cpu_vm(Executable exec, MemoryConfig cfg = {}, bool profile = false,
                      std::vector<Module> libs = {}) {
  return VirtualMachine(std::move(exec), std::move(libs), {Device::cpu()}, cfg, profile);
}

Tensor filled_with(std::vector<int64_t> shape, float value) {
  Tensor t = Tensor::empty(shape, DataType::Float(32));
  for (float& x : t.host_span<float>()) x = value;
  return t;
}

fs::path vm_kernel(const std::string& name) {
  return fs::path(KILN_EXAMPLE_KERNEL_DIR) / ("lib" + name + ".so");
}

TEST(VM, ExecutesAndSavedClosureAgrees) {  // checklist 1
  VirtualMachine vm = cpu_vm(add_program());
  EXPECT_EQ(vm["func0"](3, 4).cast<int64_t>(), 7);
  vm.save_function("func0", "saved", {Any(10), Any(20)});
  EXPECT_EQ(vm["saved"]().cast<int64_t>(), 30);
  vm.save_function("func0", "quiet", {Any(1), Any(2)}, /*include_return=*/false);
  EXPECT_TRUE(vm["quiet"]().is_none());
}

TEST(VM, NegativeImmediates) {  // checklist 2
  B b;
  b.emit_function("func0", 1);
  b.emit_call("test.vm.add", {B::r(0), B::imm(-3)}, 1);
  b.emit_ret(B::r(1));
  b.end_function("func0");
  EXPECT_EQ(cpu_vm(b.get())["func0"](1).cast<int64_t>(), -2);
}

TEST(VM, ShapeOfConstantTensor) {  // checklist 3
  B b;
  b.emit_function("main", 0);
  b.emit_call("vm.builtin.shape_of", {b.c(Constant(filled_with({3, 5}, 1.0f)))}, 0);
  b.emit_ret(B::r(0));
  b.end_function("main");
  EXPECT_EQ(cpu_vm(b.get())["main"]().cast<std::vector<int64_t>>(), (std::vector<int64_t>{3, 5}));
}

Executable storage_program() {
  B b;
  b.emit_function("main", 0);
  b.emit_call("vm.builtin.alloc_storage",
              {B::vm_state(), b.c(Constant(ShapeConstant{{24}})), B::imm(0),
               b.c(Constant(DataType::Float(32))), b.c(Constant(std::string("global")))},
              0);
  b.emit_call("vm.builtin.alloc_tensor",
              {B::r(0), B::imm(0), b.c(Constant(ShapeConstant{{4, 6}})),
               b.c(Constant(DataType::Float(32)))},
              1);
  b.emit_ret(B::r(1));
  b.end_function("main");
  return b.get();
}

TEST(VM, AllocStorageAndTensor) {  // checklists 4 and 10
  for (const char* cfg : {"pooled", "naive"}) {
    VirtualMachine vm = cpu_vm(storage_program(), cfg);
    Tensor t = vm["main"]().cast<Tensor>();
    EXPECT_EQ(std::vector<int64_t>(t.shape().begin(), t.shape().end()),
              (std::vector<int64_t>{4, 6}))
        << cfg;
    EXPECT_EQ(t.device(), Device::cpu());
    t.host_span<float>()[23] = 1.0f;  // the whole view is writable
  }
  EXPECT_THROW(MemoryConfig("lazy"), ValueError);
}

TEST(VM, StorageTooSmallForTensor) {
  B b;
  b.emit_function("main", 0);
  b.emit_call("vm.builtin.alloc_storage",
              {B::vm_state(), b.c(Constant(ShapeConstant{{4}})), B::imm(0),
               b.c(Constant(DataType::Float(32))), b.c(Constant(std::string("global")))},
              0);
  b.emit_call(
      "vm.builtin.alloc_tensor",
      {B::r(0), B::imm(8), b.c(Constant(ShapeConstant{{4}})), b.c(Constant(DataType::Float(32)))},
      1);
  b.emit_ret(B::r(1));
  b.end_function("main");
  try {
    cpu_vm(b.get(), "naive")["main"]();
    FAIL() << "an out-of-bounds alloc_tensor succeeded";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("attempted to allocate 16 at offset 8 in region that is 16 bytes"));
  }
}

TEST(VM, GotoAndIf) {  // checklist 5
  B b;
  b.emit_function("skip", 1);
  b.emit_call("test.vm.add", {B::r(0), B::imm(1)}, 1);
  b.emit_goto(2);
  b.emit_call("test.vm.add", {B::r(1), B::imm(100)}, 1);  // skipped
  b.emit_ret(B::r(1));
  b.end_function("skip");
  // choose(c, x): c != 0 ? x + 1 : x + 2
  b.emit_function("choose", 2);
  b.emit_if(B::r(0), 3);
  b.emit_call("test.vm.add", {B::r(1), B::imm(1)}, 2);
  b.emit_goto(2);
  b.emit_call("test.vm.add", {B::r(1), B::imm(2)}, 2);
  b.emit_ret(B::r(2));
  b.end_function("choose");
  VirtualMachine vm = cpu_vm(b.get());
  EXPECT_EQ(vm["skip"](5).cast<int64_t>(), 6);
  EXPECT_EQ(vm["choose"](1, 10).cast<int64_t>(), 11);
  EXPECT_EQ(vm["choose"](0, 10).cast<int64_t>(), 12);
}

TEST(VM, ClosuresCaptureAfterCallArguments) {  // checklist 6
  B b;
  // lifted(y, z, w, x) = w + x + y + z; main(w, x) returns make_closure(lifted, w, x)
  b.emit_function("lifted", 4);
  b.emit_call("test.vm.add", {B::r(0), B::r(1), B::r(2), B::r(3)}, 4);
  b.emit_ret(B::r(4));
  b.end_function("lifted");
  b.emit_function("main", 2);
  b.emit_call("vm.builtin.make_closure", {b.f("lifted"), B::r(0), B::r(1)}, 2);
  b.emit_ret(B::r(2));
  b.end_function("main");
  // call(clo, y, z) = invoke_closure(vm, clo, y, z)
  b.emit_function("call", 3);
  b.emit_call("vm.builtin.invoke_closure", {B::vm_state(), B::r(0), B::r(1), B::r(2)}, 3);
  b.emit_ret(B::r(3));
  b.end_function("call");
  VirtualMachine vm = cpu_vm(b.get());
  Any closure = vm["main"](1000, 100);
  EXPECT_TRUE(closure.as_object<ClosureObj>());
  EXPECT_EQ(vm.invoke_closure(closure, {Any(10), Any(1)}).cast<int64_t>(), 1111);
  EXPECT_EQ(vm["call"](closure, 20, 2).cast<int64_t>(), 1122);
}

TEST(VM, RecursionAndUsableAfterFailure) {  // checklist 7
  B b;
  // count(n): n == 0 ? 0 : 1 + count(n - 1), through a VM closure call
  b.emit_function("count", 1);
  b.emit_if(B::r(0), 5);
  b.emit_call("test.vm.add", {B::r(0), B::imm(-1)}, 2);
  b.emit_call("count", {B::r(2)}, 3);
  b.emit_call("test.vm.add", {B::r(3), B::imm(1)}, 4);
  b.emit_ret(B::r(4));
  b.emit_call("vm.builtin.copy", {B::imm(0)}, 1);
  b.emit_ret(B::r(1));
  b.end_function("count");
  b.emit_function("fails", 1);
  b.emit_call("count", {B::r(0)}, 1);
  b.emit_call("test.vm.fail", {B::r(1)}, 2);
  b.emit_ret(B::r(2));
  b.end_function("fails");
  VirtualMachine vm = cpu_vm(b.get());
  EXPECT_EQ(vm["count"](50).cast<int64_t>(), 50);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THROW(vm["fails"](5), ValueError);
    EXPECT_EQ(vm["count"](7).cast<int64_t>(), 7) << "the VM works after a failed call";
  }
}

// main(x) returns ((x, (x,)), x)
Executable tuple_program() {
  B b;
  b.emit_function("main", 1, {"x"});
  b.emit_call("vm.builtin.make_tuple", {B::r(0)}, 1);
  b.emit_call("vm.builtin.make_tuple", {B::r(0), B::r(1)}, 2);
  b.emit_call("vm.builtin.make_tuple", {B::r(2), B::r(0)}, 3);
  b.emit_ret(B::r(3));
  b.end_function("main");
  return b.get();
}

TEST(VM, StatefulRoundTripWithNestedTuples) {  // checklist 8
  VirtualMachine vm = cpu_vm(tuple_program());
  Tensor x = filled_with({2}, 3.0f);
  vm.set_input("main", {Any(x)});
  vm.invoke_stateful("main");
  EXPECT_EQ(vm.get_output_arity("main", {}), 2);
  EXPECT_EQ(vm.get_output_arity("main", {0}), 2);
  EXPECT_EQ(vm.get_output_arity("main", {0, 1}), 1);
  EXPECT_EQ(vm.get_output_arity("main", {1}), -1);
  Tensor leaf = vm.get_output("main", {0, 1, 0}).cast<Tensor>();
  EXPECT_FLOAT_EQ(leaf.host_span<float>()[1], 3.0f);
  auto outer = vm.get_outputs("main").as_object<ArrayObj>();
  ASSERT_TRUE(outer);
  EXPECT_EQ(outer->items.size(), 2u);
  // Inputs persist: invoke again.
  vm.invoke_stateful("main");
  try {
    vm.get_output("main", {0});
    FAIL() << "get_output returned a tuple";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot return a tuple for RPC compatibility"));
  }
  try {
    vm.get_output("main", {5});
    FAIL() << "an out-of-range index was accepted";
  } catch (const IndexError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Invalid index (5 >= 2)."));
  }
  try {
    vm.get_output("main", {1, 0});
    FAIL() << "indexing a tensor was accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Attempted to index into an object that is not an Array."));
  }
}

TEST(VM, InputsAreCopiedUnlessTheVMCanShareThem) {  // §2.9
  VirtualMachine vm = cpu_vm(tuple_program());
  Tensor owned = filled_with({4}, 1.0f);
  Tensor view = Tensor::view(owned.dl());  // a bare DLTensor*, as arrives over RPC
  vm.set_input("main", {Any(view)});
  vm.invoke_stateful("main");
  owned.host_span<float>()[0] = 7.0f;
  EXPECT_FLOAT_EQ(vm.get_output("main", {1}).cast<Tensor>().host_span<float>()[0], 1.0f)
      << "a view of memory the VM does not own is copied";
  vm.set_input("main", {Any(owned)});
  vm.invoke_stateful("main");
  owned.host_span<float>()[0] = 9.0f;
  EXPECT_FLOAT_EQ(vm.get_output("main", {1}).cast<Tensor>().host_span<float>()[0], 9.0f)
      << "a tensor already on devices[0] is shared, not copied";
}

TEST(VM, StatefulErrorKinds) {  // checklist 9
  VirtualMachine vm = cpu_vm(add_program());
  try {
    vm.invoke_stateful("func0");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("No inputs set for stateful call of func0; use `set_input` first."));
  }
  try {
    vm.get_outputs("func0");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("No output saved for call of \"func0\"; use `invoke_stateful`"));
  }
  EXPECT_THROW(vm.set_input("nope", {}), ValueError);
  EXPECT_THROW(vm.invoke_stateful("nope"), ValueError);
  EXPECT_THROW(vm.set_input("func0", {Any(1)}), TypeError);
  vm.set_input("func0", {Any(1), Any(2)});
  try {
    vm["func0"]();
    FAIL() << "a direct call without arguments succeeded";
  } catch (const RuntimeError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("Invoking function func0 expects 2 arguments (x, y), but 0 arguments "
                          "were provided."));
  }
  vm.invoke_stateful("func0");
  EXPECT_EQ(vm.get_output("func0", {}).cast<int64_t>(), 3);
  EXPECT_THROW(vm["nope"], NotFoundError);
}

TEST(VM, DeviceListAndConstantsOnFirstDevice) {  // checklist 11 (one CPU: cpu:0 twice)
  VirtualMachine vm(storage_program(), {}, {Device::cpu(), Device::cpu()});
  EXPECT_EQ(vm.devices().size(), 2u);
  EXPECT_EQ(vm["main"]().cast<Tensor>().device(), Device::cpu());
  EXPECT_THROW(VirtualMachine(storage_program(), {}, {}), ValueError);
}

TEST(VM, UnresolvedPackedFunctionFailsAtInit) {
  B b;
  b.emit_function("main", 0);
  b.emit_call("no.such.function", {}, 0);
  b.emit_ret(B::r(0));
  b.end_function("main");
  try {
    cpu_vm(b.get());
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Cannot find function 'no.such.function'"));
  }
}

TEST(VM, InstrumentSeesEveryCallAndCanSkip) {
  // The MLP-like program of §2.12: two matmul, two relu (test functions stand in).
  registry::set("test.vm.matmul",
                Function::from_packed("test.vm.matmul", [](const Any* a, int32_t) { return a[0]; }),
                true);
  registry::set("test.vm.relu",
                Function::from_packed("test.vm.relu", [](const Any* a, int32_t) { return a[0]; }),
                true);
  B b;
  b.emit_function("main", 1);
  b.emit_call("test.vm.matmul", {B::r(0)}, 1);
  b.emit_call("test.vm.relu", {B::r(1)}, 2);
  b.emit_call("test.vm.matmul", {B::r(2)}, 3);
  b.emit_call("test.vm.relu", {B::r(3), b.c(Constant(DataType::Float(32)))}, 4);
  b.emit_ret(B::r(4));
  b.end_function("main");
  VirtualMachine vm = cpu_vm(b.get());
  std::map<std::string, int> before, after;
  bool ret_none_before = true;
  std::string dtype_arg;
  vm.set_instrument(Function::from_packed("instrument", [&](const Any* a, int32_t n) -> Any {
    const std::string name = a[1].cast<std::string>();
    const bool is_before = a[2].cast<bool>();
    (is_before ? before : after)[name]++;
    if (is_before && !a[3].is_none()) ret_none_before = false;
    if (n > 5 && a[5].type_code() == KILN_TYPE_STRING) dtype_arg = a[5].cast<std::string>();
    EXPECT_EQ(a[0].type_code(), KILN_TYPE_FUNCTION);
    return is_before && name == "test.vm.matmul" ? Any(int64_t{1}) : Any();
  }));
  EXPECT_TRUE(vm["main"](5).is_none()) << "skipped calls leave none in their destination";
  EXPECT_EQ(before["test.vm.matmul"], 2);
  EXPECT_EQ(after["test.vm.matmul"], 0);
  EXPECT_EQ(before["test.vm.relu"], 2);
  EXPECT_EQ(after["test.vm.relu"], 2);
  EXPECT_TRUE(ret_none_before);
  EXPECT_EQ(dtype_arg, "float32") << "dtype arguments reach the instrument as strings";
  vm.set_instrument(Function());
  EXPECT_EQ(vm["main"](5).cast<int64_t>(), 5);
}

// An MLP layer stack on the example kernels: y = relu(x @ w + b) with pooled storage.
Executable mlp_program() {
  B b;
  b.add_import("libmatmul.so");
  b.add_import("librelu.so");
  b.add_import("libbias_add.so");
  b.emit_function("main", 3, {"x", "w", "bias"});
  b.emit_call(
      "vm.builtin.check_tensor_info",
      {B::r(0), B::imm(2), b.c(Constant(DataType::Float(32))), b.c(Constant(std::string("x")))},
      kVoidRegister);
  b.emit_call("vm.builtin.alloc_storage",
              {B::vm_state(), b.c(Constant(ShapeConstant{{64 * 32}})), B::imm(0),
               b.c(Constant(DataType::Float(32))), b.c(Constant(std::string("global")))},
              3);
  b.emit_call("vm.builtin.alloc_tensor",
              {B::r(3), B::imm(0), b.c(Constant(ShapeConstant{{64, 32}})),
               b.c(Constant(DataType::Float(32)))},
              4);
  b.emit_call("matmul", {B::r(0), B::r(1), B::r(4)});
  b.emit_call("bias_add", {B::r(4), B::r(2), B::r(4)});
  b.emit_call("relu", {B::r(4), B::r(4)});
  b.emit_ret(B::r(4));
  b.end_function("main");
  return b.get();
}

std::vector<Module> mlp_libraries() {
  return {load_module(vm_kernel("matmul")), load_module(vm_kernel("relu")),
          load_module(vm_kernel("bias_add"))};
}

TEST(VM, RunsTheExampleKernels) {
  VirtualMachine vm(mlp_program(), mlp_libraries(), {Device::cpu()});
  Tensor x = filled_with({64, 16}, 1.0f);
  Tensor w = filled_with({16, 32}, 0.5f);
  Tensor bias = filled_with({32}, -10.0f);
  Tensor y = vm["main"](x, w, bias).cast<Tensor>();
  EXPECT_FLOAT_EQ(y.host_span<float>()[0], 0.0f);  // relu(16 * 0.5 - 10) = 0
  bias = filled_with({32}, 1.0f);
  y = vm["main"](x, w, bias).cast<Tensor>();
  EXPECT_FLOAT_EQ(y.host_span<float>()[64 * 32 - 1], 9.0f);
  try {
    vm["main"](filled_with({64}, 1.0f), w, bias);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("x expect Tensor with ndim 2 but get 1"));
  }
}

TEST(VM, TimeEvaluatorPlainStatefulAndSaved) {  // §2.13
  VirtualMachine vm(mlp_program(), mlp_libraries(), {Device::cpu()});
  Tensor x = filled_with({64, 16}, 1.0f), w = filled_with({16, 32}, 0.5f),
         bias = filled_with({32}, 1.0f);
  TimeEvaluatorOptions o;
  o.number = 3;
  o.repeat = 2;
  EXPECT_EQ(vm.time_evaluator("main", Device::cpu(), o).call(x, w, bias).results().size(), 2u);
  vm.set_input("main", {Any(x), Any(w), Any(bias)});
  auto stateful = vm.time_evaluator("invoke_stateful", Device::cpu(), o).call(std::string("main"));
  EXPECT_GT(stateful.mean(), 0.0);
  vm.save_function("main", "saved_main", {Any(x), Any(w), Any(bias)});
  auto saved = vm.time_evaluator("saved_main", Device::cpu(), o).call();
  EXPECT_EQ(saved.results().size(), 2u);
  EXPECT_GT(saved.min(), 0.0);
}

TEST(VM, ProfileReportsKernelCallsAndTotals) {  // §2.14
  VirtualMachine vm(mlp_program(), mlp_libraries(), {Device::cpu()}, {}, /*profile=*/true);
  Tensor x = filled_with({64, 16}, 1.0f), w = filled_with({16, 32}, 0.5f),
         bias = filled_with({32}, 1.0f);
  profiling::Report report = vm.profile("main", {Any(x), Any(w), Any(bias)});
  const std::string table = report.table();
  EXPECT_THAT(table, HasSubstr("matmul"));
  EXPECT_THAT(table, HasSubstr("relu"));
  EXPECT_THAT(table, HasSubstr("Duration"));
  EXPECT_THAT(table, HasSubstr("float32[64, 16], float32[16, 32], float32[64, 32]"));
  EXPECT_THAT(report.json(), HasSubstr("\"Executor\""));
  bool found_alloc = false;
  for (const auto& call : report.calls) {
    auto it = call.find("Name");
    if (it != call.end() && std::get<std::string>(it->second) == "vm.builtin.alloc_storage")
      found_alloc = true;
  }
  EXPECT_FALSE(found_alloc) << "calls without tensor arguments are not recorded";
  // set_input then profile with no arguments; extra arguments then are an error.
  vm.set_input("main", {Any(x), Any(w), Any(bias)});
  EXPECT_THAT(vm.profile("main", {}).table(), HasSubstr("bias_add"));
  EXPECT_THROW(vm.profile("main", {Any(x)}), ValueError);
  VirtualMachine plain(mlp_program(), mlp_libraries(), {Device::cpu()});
  EXPECT_THROW(plain.profile("main", {Any(x), Any(w), Any(bias)}), RuntimeError);
}

TEST(VM, ModuleFunctionTable) {  // §2.6
  VirtualMachine vm = cpu_vm(add_program());
  Module m = vm.module();
  m["set_input"]("func0", 2, 5);
  m["invoke_stateful"]("func0");
  EXPECT_EQ(m["get_output"]("func0").cast<int64_t>(), 7);
  EXPECT_EQ(m["get_function_arity"]("func0").cast<int64_t>(), 2);
  EXPECT_EQ(m["get_function_param_name"]("func0", 1).cast<std::string>(), "y");
  EXPECT_THROW(m["get_function_param_name"]("func0", 2), ValueError);
  m["save_function"]("func0", "s", true, 1, 1);
  EXPECT_EQ(vm.module()["s"]().cast<int64_t>(), 2);
  EXPECT_EQ(m["func0"](1, 2).cast<int64_t>(), 3);
}

TEST(VM, ModuleIsALiveViewOfTheVM) {  // §2.6: the reference's wrapper works through the module
  VirtualMachine vm(mlp_program(), mlp_libraries(), {Device::cpu()});
  Module m = vm.module();
  EXPECT_FALSE(m.has_function("saved_main"));
  Tensor x = filled_with({64, 16}, 1.0f), w = filled_with({16, 32}, 0.5f),
         bias = filled_with({32}, 1.0f);
  // Saved through the module's own save_function: found in that module, listed, and timed
  // by a time evaluator made from it.
  m["save_function"]("main", "saved_main", true, x, w, bias);
  EXPECT_TRUE(m.has_function("saved_main"));
  EXPECT_THAT(m.function_names(), ::testing::Contains("saved_main"));
  const Tensor direct = vm["main"](x, w, bias).cast<Tensor>();
  const Tensor saved = m["saved_main"]().cast<Tensor>();
  EXPECT_EQ(saved.host_span<float>()[0], direct.host_span<float>()[0]);
  EXPECT_EQ(time_evaluator(m, "saved_main", Device::cpu(), 2, 2).call().results().size(), 2u);
  // Saved through the VM after the module was made: found too; a re-save replaces it.
  vm.save_function("main", "later", {Any(x), Any(w), Any(bias)}, /*include_return=*/false);
  EXPECT_TRUE(m["later"]().is_none());
  m["save_function"]("main", "later", true, x, w, bias);
  EXPECT_FALSE(m["later"]().is_none());
  try {
    m["never_saved"];
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("saved_main"));  // the listing includes saved functions
  }
}

TEST(VM, ExecutableMakesVMsThroughItsModuleFunctions) {  // §2.1 vm_load_executable, §2.8
  const Module exec = make_executable_module(add_program(), {});
  const Module vm = exec["vm_load_executable"]().cast<Module>();
  try {
    vm["func0"](1, 2);
    FAIL();
  } catch (const RuntimeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("VM function 'func0' called before vm_initialization"));
  }
  EXPECT_THROW(vm["vm_initialization"](kDLCPU, 0), ValueError);     // not a multiple of 3
  EXPECT_THROW(vm["vm_initialization"](kDLCPU, 0, 3), ValueError);  // no allocator 3
  vm["vm_initialization"](kDLCPU, 0, 2);
  EXPECT_THROW(vm["vm_initialization"](kDLCPU, 0, 2), RuntimeError);  // once only
  EXPECT_EQ(vm["func0"](1, 2).cast<int64_t>(), 3);
  vm["save_function"]("func0", "plus_ten", true, 10);
  EXPECT_EQ(vm["plus_ten"](5).cast<int64_t>(), 15);
  // The profiling VM can profile; the plain one says it cannot.
  const Module prof = exec["vm_profiler_load_executable"]().cast<Module>();
  prof["vm_initialization"](kDLCPU, 0, 1);
  EXPECT_THAT(prof["profile"]("func0", 1, 2).cast<std::string>(), HasSubstr("\"calls\""));
  EXPECT_THROW(vm["profile"]("func0", 1, 2), RuntimeError);
  // Each call makes a new VM: state is not shared.
  const Module other = exec["vm_load_executable"]().cast<Module>();
  other["vm_initialization"](kDLCPU, 0, 2);
  EXPECT_FALSE(other.has_function("plus_ten"));
}

TEST(VM, RefusesADeviceIndexTheBackendDoesNotHave) {  // §2.8, at construction, not mid-run
  try {
    VirtualMachine vm(storage_program(), {}, {Device::cpu(0), Device::cpu(1)});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("VirtualMachine: device cpu:1 does not exist: there is one "
                                    "(cpu:0)"));
  }
  EXPECT_THROW(VirtualMachine(storage_program(), {}, {Device::cpu(-1)}), ValueError);
}

TEST(VM, BuiltinErrorKinds) {  // checklist 13
  Function check_tensor = registry::require("vm.builtin.check_tensor_info");
  try {
    check_tensor(5, 2, Any(), "ctx");
    FAIL();
  } catch (const TypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ctx expect a Tensor but get int"));
  }
  Tensor t = filled_with({2, 3}, 0.0f);
  try {
    check_tensor(t, 2, DataType::Int(32), "ctx");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ctx expect Tensor with dtype int32 but get float32"));
  }
  EXPECT_NO_THROW(check_tensor(t, -1, "ctx"));
  // An empty dtype string, as the reference emits for an annotation without a dtype, and
  // None check nothing; the ndim is still checked.
  EXPECT_NO_THROW(check_tensor(t, 2, std::string(), "ctx"));
  EXPECT_NO_THROW(check_tensor(t, 2, Any(), "ctx"));
  EXPECT_NO_THROW(check_tensor(t, 2, DataType::Float(32), "ctx"));
  EXPECT_THROW(check_tensor(t, 3, std::string(), "ctx"), ValueError);
  EXPECT_THROW(check_tensor(t, 2, std::string("float16"), "ctx"), ValueError);
  Function match = registry::require("vm.builtin.match_shape");
  Tensor heap = Tensor::empty({2}, DataType::Int(64));
  match(t, heap, 2, 1, 0, 0, 3, "m");  // store dim 0 at heap[0]; dim 1 must be 3
  EXPECT_EQ(heap.host_span<int64_t>()[0], 2);
  EXPECT_THROW(match(t, heap, 2, 3, 0, 0, 4, "m"), RuntimeError);
  EXPECT_THROW(match(t, heap, 1, 2, 0, "m"), RuntimeError);
  EXPECT_EQ(
      registry::require("vm.builtin.make_shape")(heap, 2, 1, 0, 0, 7).cast<std::vector<int64_t>>(),
      (std::vector<int64_t>{2, 7}));
  Function tuple_info = registry::require("vm.builtin.check_tuple_info");
  try {
    tuple_info(make_array({Any(1)}), 2, "tup");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("tup expect a Tuple with 2 elements,  but get a Tuple with 1 elements."));
  }
  EXPECT_THROW(registry::require("vm.builtin.check_func_info")(1, "f"), TypeError);
  EXPECT_THROW(registry::require("vm.builtin.check_shape_info")(Any::shape({1, 2}), 3, "s"),
               ValueError);
}

TEST(VM, ExecutableModuleRoundTripsThroughTar) {  // checklist 12, and VM programs in local_run
  TempDir dir;
  Module exec = make_executable_module(mlp_program(), mlp_libraries(), "mlp.kvm");
  EXPECT_EQ(exec.kind(), kExecutableModuleKind);
  const std::string text = exec["as_text"]().cast<std::string>();
  exec.export_library(dir.path() / "mlp.tar", "tar");
  Module back = load_module(dir.path() / "mlp.tar");
  EXPECT_EQ(back["as_text"]().cast<std::string>(), text);
  Tensor x = filled_with({64, 16}, 1.0f), w = filled_with({16, 32}, 0.5f),
         bias = filled_with({32}, 1.0f);
  EXPECT_FLOAT_EQ(back["main"](x, w, bias).cast<Tensor>().host_span<float>()[5], 9.0f);
  // local_run exports, reloads and times the VM function like any module function.
  testing::RunHooks hooks;
  hooks.function = "main";
  auto result = testing::local_run(exec, "cpu", {Any(x), Any(w), Any(bias)}, std::nullopt, "tar",
                                   std::nullopt, hooks);
  EXPECT_FALSE(result.profile.results().empty());
  EXPECT_GT(result.profile.mean(), 0.0);
}

}  // namespace
}  // namespace kiln::vm
