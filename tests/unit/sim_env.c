/* sim_env.c — the environment variables: GPUMEM_SIM_MEMORY, GPUMEM_SIM_FAULTS,
 * GPUMEM_SIM_EVENT_DELAY, GPUMEM_SIM_STATS. The driver reads them once per process, so each
 * case runs in a forked child (this parent never calls the driver) whose stderr is captured.
 * Bad values must produce a message naming the variable and the value, and be ignored. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/sim.h"
#include "tests/unit/sim_test.h"

typedef int (*child_fn)(void); /* returns the child's exit status: 0 = its checks held */

/* Runs fn in a child with `var`=`value` set; returns its exit status and its stderr. */
static int run_child(const char *var, const char *value, child_fn fn, char *err, size_t errlen)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        unsetenv("GPUMEM_SIM_MEMORY");
        unsetenv("GPUMEM_SIM_FAULTS");
        unsetenv("GPUMEM_SIM_EVENT_DELAY");
        unsetenv("GPUMEM_SIM_STATS");
        unsetenv("GPUMEM_SIM_BACKING");
        unsetenv("GPUMEM_SIM_COSTS");
        unsetenv("GPUMEM_SIM_DEVICES");
        unsetenv("GPUMEM_SIM_ASYNC");
        unsetenv("GPUMEM_SIM_CONTEXT_BYTES");
        unsetenv("GPUMEM_SIM_PROFILE");
        setenv(var, value, 1);
        exit(fn()); /* exit(), not _exit(): GPUMEM_SIM_STATS prints from a destructor */
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < errlen && (r = read(fds[0], err + n, errlen - 1 - n)) > 0)
        n += (size_t)r;
    err[n] = '\0';
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static size_t total_mem(void)
{
    size_t fr = 0, total = 0;
    if (sim_test_ctx(0) || cuMemGetInfo(&fr, &total)) return 0;
    return total;
}

static int child_memory_is_1g(void)
{
    return total_mem() == ((size_t)1 << 30) ? 0 : 1;
}
static int child_memory_is_default_16g(void)
{
    return total_mem() == ((size_t)16 << 30) ? 0 : 1;
}

static void test_memory_size_from_env(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(run_child("GPUMEM_SIM_MEMORY", "1G", child_memory_is_1g, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(run_child("GPUMEM_SIM_MEMORY", "1024M", child_memory_is_1g, err, sizeof err),
                     0);
    assert_int_equal(run_child("GPUMEM_SIM_MEMORY", "1GiB", child_memory_is_1g, err, sizeof err),
                     0);
    /* Bad value: named in a message, default used. */
    assert_int_equal(
        run_child("GPUMEM_SIM_MEMORY", "sixteen", child_memory_is_default_16g, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_MEMORY='sixteen'"));
    assert_int_equal(
        run_child("GPUMEM_SIM_MEMORY", "nan", child_memory_is_default_16g, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_MEMORY='nan'"));
    assert_int_equal(
        run_child("GPUMEM_SIM_MEMORY", "1e30", child_memory_is_default_16g, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_MEMORY='1e30'"));
    assert_int_equal(
        run_child("GPUMEM_SIM_MEMORY", "1073741824i", child_memory_is_default_16g, err, sizeof err),
        0);
    assert_non_null(strstr(err, "GPUMEM_SIM_MEMORY='1073741824i'"));
}

static int child_second_alloc_fails(void)
{
    CUdeviceptr a, b, c;
    if (sim_test_ctx(0) || cuMemAlloc(&a, 512)) return 1;
    if (cuMemAlloc(&b, 512) != CUDA_ERROR_OUT_OF_MEMORY) return 2;
    if (cuMemAlloc(&c, 512)) return 3;
    return 0;
}

static int child_all_allocs_succeed(void)
{
    CUdeviceptr a;
    if (sim_test_ctx(0)) return 1;
    for (int i = 0; i < 4; i++)
        if (cuMemAlloc(&a, 512)) return 2;
    return 0;
}

static void test_faults_from_env(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(
        run_child("GPUMEM_SIM_FAULTS", "alloc:2", child_second_alloc_fails, err, sizeof err), 0);
    assert_string_equal(err, "");
    /* Bad syntax: clear message naming the value; the variable is ignored, the program runs. */
    assert_int_equal(
        run_child("GPUMEM_SIM_FAULTS", "alloc=2", child_all_allocs_succeed, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_FAULTS='alloc=2'"));
    assert_non_null(strstr(err, "ignored"));
    assert_int_equal(run_child("GPUMEM_SIM_FAULTS", "alloc:2,oom_at:big", child_all_allocs_succeed,
                               err, sizeof err),
                     0);
    assert_non_null(strstr(err, "oom_at:big"));
}

static int child_event_needs_two_queries(void)
{
    CUevent e;
    if (sim_test_ctx(0) || cuEventCreate(&e, 0) || cuEventRecord(e, NULL)) return 1;
    if (cuEventQuery(e) != CUDA_ERROR_NOT_READY) return 2;
    if (cuEventQuery(e) != CUDA_ERROR_NOT_READY) return 3;
    if (cuEventQuery(e) != CUDA_SUCCESS) return 4;
    return 0;
}

static int child_event_completes_at_once(void)
{
    CUevent e;
    if (sim_test_ctx(0) || cuEventCreate(&e, 0) || cuEventRecord(e, NULL)) return 1;
    return cuEventQuery(e) == CUDA_SUCCESS ? 0 : 2;
}

static int child_event_completes_after_simulated_time(void)
{
    CUevent e;
    if (sim_test_ctx(0) || cuEventCreate(&e, 0) || cuEventRecord(e, NULL)) return 1;
    int n = 0;
    while (cuEventQuery(e) == CUDA_ERROR_NOT_READY && n < 100000)
        n++;
    return n >= 150 && n <= 200 ? 0 : 2; /* 200 us of 1-us queries, less the record's cost */
}

static void test_event_delay_from_env(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(
        run_child("GPUMEM_SIM_EVENT_DELAY", "2", child_event_needs_two_queries, err, sizeof err),
        0);
    assert_int_equal(
        run_child("GPUMEM_SIM_EVENT_DELAY", "-3", child_event_completes_at_once, err, sizeof err),
        0);
    assert_non_null(strstr(err, "GPUMEM_SIM_EVENT_DELAY='-3'"));
    assert_int_equal(run_child("GPUMEM_SIM_EVENT_DELAY", "200us",
                               child_event_completes_after_simulated_time, err, sizeof err),
                     0);
    assert_int_equal(run_child("GPUMEM_SIM_EVENT_DELAY", "0.2ms",
                               child_event_completes_after_simulated_time, err, sizeof err),
                     0);
    assert_int_equal(
        run_child("GPUMEM_SIM_EVENT_DELAY", "3s", child_event_completes_at_once, err, sizeof err),
        0);
    assert_non_null(strstr(err, "GPUMEM_SIM_EVENT_DELAY='3s'"));
}

static int child_some_calls(void)
{
    CUdeviceptr a;
    if (sim_test_ctx(0) || cuMemAlloc(&a, 1 << 20) || cuMemFree(a)) return 1;
    return 0;
}

static void test_stats_printed_at_exit(void **state)
{
    (void)state;
    char err[8192];
    assert_int_equal(run_child("GPUMEM_SIM_STATS", "1", child_some_calls, err, sizeof err), 0);
    assert_non_null(strstr(err, "simulated driver time"));
    char *line = strstr(err, "cuMemAlloc ");
    assert_non_null(line);
    unsigned long long calls = 0, bytes = 0;
    double us = 0;
    assert_int_equal(sscanf(line, "cuMemAlloc %llu %llu %lf", &calls, &bytes, &us), 3);
    assert_int_equal(calls, 1);
    assert_int_equal(bytes, 1 << 20);
    assert_true(us > 0);
    assert_non_null(strstr(err, "cuMemFree "));
    /* Off by default. */
    assert_int_equal(run_child("GPUMEM_SIM_STATS", "0", child_some_calls, err, sizeof err), 0);
    assert_string_equal(err, "");
}

static int child_alloc_costs_7(void)
{
    CUdeviceptr a;
    if (sim_test_ctx(0) || cuMemAlloc(&a, 512)) return 1;
    sim_stats st;
    sim_stats_get(&st);
    return st.op[SIM_OP_MEM_ALLOC].us > 7 - 1e-6 && st.op[SIM_OP_MEM_ALLOC].us < 7.01 ? 0 : 2;
}

static int child_alloc_costs_default(void)
{
    CUdeviceptr a;
    double fixed, per;
    if (sim_test_ctx(0) || cuMemAlloc(&a, 512) || sim_cost_get(SIM_OP_MEM_ALLOC, &fixed, &per))
        return 1;
    sim_stats st;
    sim_stats_get(&st);
    double want = fixed + per * 512.0 / 1048576.0;
    return st.op[SIM_OP_MEM_ALLOC].us - want < 1e-9 && want - st.op[SIM_OP_MEM_ALLOC].us < 1e-9 ? 0
                                                                                                : 2;
}

static void test_costs_from_env(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(
        run_child("GPUMEM_SIM_COSTS", "cuMemAlloc=7+0", child_alloc_costs_7, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(
        run_child("GPUMEM_SIM_COSTS", "cuMemAlloc:7", child_alloc_costs_default, err, sizeof err),
        0);
    assert_non_null(strstr(err, "GPUMEM_SIM_COSTS='cuMemAlloc:7'"));
}

/* a cost entry is FIXED+PER */
static int cost_is(int op, double fixed, double per)
{
    double f, p;
    if (sim_cost_get(op, &f, &p)) return 0;
    return f > fixed - 1e-9 && f < fixed + 1e-9 && p > per - 1e-9 && p < per + 1e-9;
}
/* the h200 profile: the H200's measured costs over the defaults */
static int child_h200_costs(void)
{
    double launch, per;
    if (sim_test_ctx(0) || sim_cost_get(SIM_OP_LAUNCH, &launch, &per)) return 1;
    if (!cost_is(SIM_OP_MEM_ALLOC, 44.2, 0.117) || !cost_is(SIM_OP_MEM_MAP, 0.68, 0.0045)) return 2;
    if (launch != 5.0) return 3; /* not measured: the default's */
    if (sim_costs_set("cuMemAlloc=1") || !cost_is(SIM_OP_MEM_ALLOC, 1, 0.117)) return 4;
    if (sim_costs_set("") || !cost_is(SIM_OP_MEM_ALLOC, 44.2, 0.117)) return 5; /* the profile's */
    return 0;
}
/* GPUMEM_SIM_COSTS applies over the profile's table */
static int child_h200_costs_and_env(void)
{
    setenv("GPUMEM_SIM_COSTS", "cuMemMap=3", 1); /* read at the first driver call, below */
    if (sim_test_ctx(0)) return 1;
    return cost_is(SIM_OP_MEM_MAP, 3, 0.0045) && cost_is(SIM_OP_MEM_ALLOC, 44.2, 0.117) ? 0 : 2;
}
/* the default profile: the default table */
static int child_default_costs(void)
{
    if (sim_test_ctx(0)) return 1;
    return cost_is(SIM_OP_MEM_ALLOC, 20, 0.5) && cost_is(SIM_OP_MEM_MAP, 10, 0.1) ? 0 : 2;
}

static void test_profile_costs(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(run_child("GPUMEM_SIM_PROFILE", "h200", child_h200_costs, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(
        run_child("GPUMEM_SIM_PROFILE", "h200", child_h200_costs_and_env, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(
        run_child("GPUMEM_SIM_PROFILE", "default", child_default_costs, err, sizeof err), 0);
}

static int child_three_devices(void)
{
    int n = 0;
    if (sim_test_ctx(0) || cuDeviceGetCount(&n)) return 1;
    return n == 3 && sim_device_count() == 3 ? 0 : 2;
}
static int child_one_device(void)
{
    int n = 0;
    if (sim_test_ctx(0) || cuDeviceGetCount(&n)) return 1;
    return n == 1 ? 0 : 2;
}
static int child_async(void)
{
    return sim_test_ctx(0) == CUDA_SUCCESS && sim_async_enabled() == 1 ? 0 : 1;
}
static int child_sync(void)
{
    return sim_test_ctx(0) == CUDA_SUCCESS && sim_async_enabled() == 0 ? 0 : 1;
}
static int child_context_100m(void)
{
    sim_device_accounting a;
    if (sim_test_ctx(0) || sim_device_info(0, &a)) return 1;
    return a.context_bytes == ((size_t)100 << 20) && a.free == a.capacity - a.context_bytes ? 0 : 2;
}
static int child_context_default(void)
{
    sim_device_accounting a;
    if (sim_test_ctx(0) || sim_device_info(0, &a)) return 1;
    return a.context_bytes == ((size_t)426 << 20) ? 0 : 2; /* 16G device: the cited default */
}

static void test_devices_async_context_from_env(void **state)
{
    (void)state;
    char err[4096];
    assert_int_equal(run_child("GPUMEM_SIM_DEVICES", "3", child_three_devices, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(run_child("GPUMEM_SIM_DEVICES", "0", child_one_device, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_DEVICES='0'"));
    assert_int_equal(run_child("GPUMEM_SIM_DEVICES", "two", child_one_device, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_DEVICES='two'"));
    assert_int_equal(run_child("GPUMEM_SIM_ASYNC", "1", child_async, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(run_child("GPUMEM_SIM_ASYNC", "yes", child_sync, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_ASYNC='yes'"));
    assert_int_equal(
        run_child("GPUMEM_SIM_CONTEXT_BYTES", "100M", child_context_100m, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(
        run_child("GPUMEM_SIM_CONTEXT_BYTES", "lots", child_context_default, err, sizeof err), 0);
    assert_non_null(strstr(err, "GPUMEM_SIM_CONTEXT_BYTES='lots'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_size_from_env),
        cmocka_unit_test(test_devices_async_context_from_env),
        cmocka_unit_test(test_faults_from_env),
        cmocka_unit_test(test_event_delay_from_env),
        cmocka_unit_test(test_stats_printed_at_exit),
        cmocka_unit_test(test_costs_from_env),
        cmocka_unit_test(test_profile_costs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
