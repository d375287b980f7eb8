/* A simulated libnvidia-ml.so.1: NVML's C ABI answered from the simulated driver's state file.
 *
 * It is the one simulated driver: every NVML client (pynvml under gpuprov, NVIDIA's device plugin,
 * nvidia-smi) loads it by name, as it loads the real one. It serves handles, names, UUIDs, MIG
 * devices, error codes and their precedence, for reading and for changing the GPUs (MIG mode, GPU
 * and compute instances at exact placements), faults included (tests/test_nvml_sim_rules.py).
 * Data comes from gpuprov itself: build.py generates sim_data.h from the catalog and pynvml. The event API
 * delivers the XIDs that `gpuprov-sim inject xid` raises (events.h). Every other NVML function a
 * consumer may link returns NVML_ERROR_NOT_SUPPORTED (unsupported.h): a program that dlopens
 * this library never finds a symbol missing. What hardware does outside NVML (a host's GPUs,
 * resets, faults) is the gpuprovSim* API of admin.c.
 *
 * Each call reads the state file anew (writers replace it atomically, so a read is a consistent
 * snapshot) and keeps nothing but the nvmlInit count and the event sets, so any thread may call
 * at any time. A call that changes the GPUs holds the state's lock from its read to its write
 * (state.h). GPUPROV_NVML_SIM names the state file (default: SIM_STATE_PATH);
 * GPUPROV_NVML_SIM_TRACE, when set, names a file that gets one "<function> <return code>" line per
 * call.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "events.h"
#include "nvml_abi.h"
#include "sim_consts.h"
#include "state.h"
#include "uuid5.h"

#define EXPORT __attribute__((visibility("default")))

/* A versioned struct's version word carries its size (nvml.h NVML_STRUCT_VERSION). */
_Static_assert((MEMORY_V2 & 0xFFFFFF) == sizeof(nvmlMemory_v2_t), "nvmlMemory_v2_t");
_Static_assert((GPU_INSTANCE_PROFILE_INFO_V2 & 0xFFFFFF) == sizeof(nvmlGpuInstanceProfileInfo_v2_t),
               "nvmlGpuInstanceProfileInfo_v2_t");
_Static_assert((COMPUTE_INSTANCE_PROFILE_INFO_V2 & 0xFFFFFF) ==
                   sizeof(nvmlComputeInstanceProfileInfo_v2_t),
               "nvmlComputeInstanceProfileInfo_v2_t");

/* The events every simulated GPU reports (all catalog models have ECC memory). */
#define SUPPORTED_EVENTS \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeXidCriticalError)

static int initialized;

/* -- call frame ----------------------------------------------------------------------------- */

static int trace(const char *function, int rc)
{
    const char *path = getenv(SIM_TRACE_ENV);
    if (path && *path) {
        char line[160];
        int n = snprintf(line, sizeof(line), "%s %d\n", function, rc);
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (write(fd, line, (size_t)n) < 0) {
                /* tracing is best effort */
            }
            close(fd);
        }
    }
    return rc;
}

/* The calls that change the GPUs: they hold the state's lock from their read to their write. */
static int changes_state(const char *function)
{
    static const char *const CHANGES[] = {
        "nvmlDeviceSetMigMode",         "nvmlDeviceCreateGpuInstance",
        "nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceDestroy",
        "nvmlGpuInstanceCreateComputeInstance",     "nvmlComputeInstanceDestroy",
    };
    for (unsigned i = 0; i < sizeof(CHANGES) / sizeof(CHANGES[0]); i++)
        if (strcmp(CHANGES[i], function) == 0)
            return 1;
    return 0;
}

/* One served call: the state it reads,
 * the lock it holds, and whether a fault on its function still counts successes. */
struct frame {
    const char *function; /* the name the Python simulator and faults know it by */
    struct sim_state *s;
    int lock;
    int count_fault;
};

static int fault_code(const struct sim_fault *f)
{
    int code;
    return f->error[0] && catalog_error_code(f->error, &code) ? code : NVML_ERROR_UNKNOWN;
}

static int begin(struct frame *c, const char *function, int needs_init)
{
    char problem[512];
    const char *path = state_path();
    *c = (struct frame){function, NULL, -1, 0};
    if (needs_init && !__atomic_load_n(&initialized, __ATOMIC_SEQ_CST))
        return NVML_ERROR_UNINITIALIZED;
    if (changes_state(function) && (c->lock = state_lock(path, problem, sizeof(problem))) < 0)
        return NVML_ERROR_UNKNOWN;
    c->s = state_load(path, problem, sizeof(problem));
    if (c->s == NULL)
        return NVML_ERROR_UNKNOWN;
    if (c->s->fault.set && strcmp(c->s->fault.function, function) == 0) {
        if (fault_fired(&c->s->fault))
            return fault_code(&c->s->fault);
        c->count_fault = 1;
    }
    return NVML_SUCCESS;
}

static void count_success(struct sim_fault *f)
{
    f->succeeded++;
    f->has_succeeded = 1;
}

/* A call that read without the lock and let a fault's budget count it: count it under the lock
 * now (the call itself did not hold the lock, so a blocking wait never holds up writers). */
static int count_after(const char *function)
{
    char problem[512];
    const char *path = state_path();
    int lock = state_lock(path, problem, sizeof(problem)), rc = 0;
    struct sim_state *s = lock < 0 ? NULL : state_load(path, problem, sizeof(problem));
    if (s != NULL && s->fault.set && strcmp(s->fault.function, function) == 0 &&
        !fault_fired(&s->fault)) {
        count_success(&s->fault);
        rc = state_save(path, s, problem, sizeof(problem));
    }
    state_free(s);
    state_unlock(lock);
    return rc;
}

static int finish(struct frame *c, const char *symbol, int rc)
{
    char problem[512];
    if (rc == NVML_SUCCESS && c->lock >= 0) {
        if (c->count_fault)
            count_success(&c->s->fault);
        if (state_save(state_path(), c->s, problem, sizeof(problem)) != 0)
            rc = NVML_ERROR_UNKNOWN;
    } else if (rc == NVML_SUCCESS && c->count_fault && count_after(c->function) != 0) {
        rc = NVML_ERROR_UNKNOWN;
    }
    state_unlock(c->lock);
    state_free(c->s);
    return trace(symbol, rc);
}

/* SERVED(symbol, function, call): begin as `function` (the name the Python simulator knows, for
 * faults), run `call` with `s` bound to the state, finish (write, count, trace as `symbol`). */
#define SERVED(symbol, function, call)                      \
    {                                                       \
        struct frame c_;                                     \
        int rc = begin(&c_, #function, 1);                  \
        struct sim_state *s = c_.s;                         \
        if (rc == NVML_SUCCESS)                             \
            rc = call;                                      \
        return finish(&c_, #symbol, rc);                    \
    }

/* -- handles -------------------------------------------------------------------------------- */

static uintptr_t encode(unsigned kind, unsigned gpu, unsigned gi, unsigned ci)
{
    return (uintptr_t)HANDLE_TAG << 44 | (uintptr_t)kind << 36 | (uintptr_t)gpu << 24 |
           (uintptr_t)gi << 12 | ci;
}

struct handle {
    unsigned kind, gpu, gi, ci;
};

static struct handle decode(uintptr_t value)
{
    struct handle h = {0, 0, 0, 0};
    if (value >> 44 == HANDLE_TAG)
        h = (struct handle){value >> 36 & 0xFF, value >> 24 & 0xFFF, value >> 12 & 0xFFF,
                            value & 0xFFF};
    return h;
}

#define KINDS(a, b) (1u << (a) | 1u << (b))

static int gpu_of(struct sim_state *s, uintptr_t handle, unsigned kinds, struct sim_gpu **gpu)
{
    struct handle h = decode(handle);
    if (h.kind == 0 || h.kind > 31 || !(kinds & 1u << h.kind) || h.gpu >= s->gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *gpu = &s->gpus[h.gpu];
    return NVML_SUCCESS;
}

static int model_of(const struct sim_gpu *gpu, const struct sim_model **model)
{
    *model = gpu->model;
    return gpu->model ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

static int mig_model(const struct sim_gpu *gpu, int enabled, const struct sim_model **model)
{
    int rc = model_of(gpu, model);
    if (rc == NVML_SUCCESS && (!(*model)->profile_count || (enabled && !gpu->mig_current)))
        rc = NVML_ERROR_NOT_SUPPORTED;
    return rc;
}

static int find_gi(struct sim_state *s, unsigned index, unsigned gi_id, struct sim_gpu **gpu,
                   struct sim_gi **gi)
{
    if (index < s->gpu_count && s->gpus[index].mig_current)
        for (unsigned i = 0; i < s->gpus[index].gi_count; i++)
            if (s->gpus[index].gis[i].id == gi_id) {
                *gpu = &s->gpus[index];
                *gi = &s->gpus[index].gis[i];
                return NVML_SUCCESS;
            }
    return NVML_ERROR_INVALID_ARGUMENT;
}

static int gpu_instance(struct sim_state *s, uintptr_t handle, struct sim_gpu **gpu,
                        struct sim_gi **gi)
{
    struct handle h = decode(handle);
    if (h.kind != KIND_GPU_INSTANCE)
        return NVML_ERROR_INVALID_ARGUMENT;
    return find_gi(s, h.gpu, h.gi, gpu, gi);
}

static int compute_instance(struct sim_state *s, uintptr_t handle, unsigned kind,
                            struct sim_gpu **gpu, struct sim_gi **gi, struct sim_ci **ci)
{
    struct handle h = decode(handle);
    int rc = h.kind == kind ? find_gi(s, h.gpu, h.gi, gpu, gi) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned i = 0; i < (*gi)->ci_count; i++)
        if ((*gi)->cis[i].id == h.ci) {
            *ci = &(*gi)->cis[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_INVALID_ARGUMENT;
}

static int gi_profile(const struct sim_gpu *gpu, const struct sim_gi *gi,
                      const struct sim_profile **profile)
{
    const struct sim_model *model;
    int rc = model_of(gpu, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    *profile = catalog_profile(model, gi->profile_id);
    return *profile ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* A MIG device handle; a full GPU's handle is NOT_SUPPORTED (_Driver._mig_device). */
static int mig_device(struct sim_state *s, uintptr_t handle, struct sim_gpu **gpu,
                      struct sim_gi **gi, struct sim_ci **ci)
{
    if (decode(handle).kind == KIND_DEVICE)
        return NVML_ERROR_NOT_SUPPORTED;
    return compute_instance(s, handle, KIND_MIG_DEVICE, gpu, gi, ci);
}

/* The i-th MIG device of `gpu`: GIs by id, then their CIs by id (both sorted at load). */
static int mig_device_at(struct sim_gpu *gpu, unsigned position, struct sim_gi **gi,
                         struct sim_ci **ci)
{
    for (unsigned g = 0; g < gpu->gi_count; g++)
        for (unsigned c = 0; c < gpu->gis[g].ci_count; c++)
            if (position-- == 0) {
                *gi = &gpu->gis[g];
                *ci = &gpu->gis[g].cis[c];
                return 1;
            }
    return 0;
}

/* "MIG 3g.40gb" for a CI spanning its GI, "MIG 1c.3g.40gb" for a smaller one (_ci_name). */
static int ci_name(const struct sim_profile *gi_profile, unsigned ci_constant, char *out,
                   size_t size)
{
    unsigned slices;
    if (!catalog_ci_slices(ci_constant, &slices))
        return NVML_ERROR_UNKNOWN;
    if (slices == gi_profile->compute_slices)
        snprintf(out, size, "MIG %s", gi_profile->name);
    else
        snprintf(out, size, "MIG %uc.%s", slices, gi_profile->name);
    return NVML_SUCCESS;
}

static void mig_uuid(const struct sim_gpu *gpu, const struct sim_gi *gi, const struct sim_ci *ci,
                     char out[41])
{
    char name[160];
    snprintf(name, sizeof(name), "%s/%u/%u", gpu->uuid, gi->id, ci->id);
    memcpy(out, "MIG-", 4);
    uuid5(catalog_mig_uuid_namespace(), name, out + 4);
}

static int write_string(char *buffer, unsigned length, const char *text)
{
    if (buffer == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buffer, text);
    return NVML_SUCCESS;
}

#define STORE(pointer, value)                         \
    do {                                              \
        if ((pointer) == NULL)                        \
            return NVML_ERROR_INVALID_ARGUMENT;       \
        *(pointer) = (value);                         \
    } while (0)

/* -- system --------------------------------------------------------------------------------- */

static int cuda_major(const char *driver_version)
{
    int branch = atoi(driver_version);
    return branch >= 580 ? 13 : branch >= 525 ? 12 : 11;
}

static int driver_version(struct sim_state *s, char *buffer, unsigned length)
{
    return write_string(buffer, length, s->version);
}

static int nvml_version(struct sim_state *s, char *buffer, unsigned length)
{
    char text[96];
    snprintf(text, sizeof(text), "%d.%s", cuda_major(s->version), s->version);
    return write_string(buffer, length, text);
}

static int cuda_driver_version(struct sim_state *s, int *version)
{
    STORE(version, cuda_major(s->version) * 1000);
    return NVML_SUCCESS;
}

static int device_count(struct sim_state *s, unsigned *count)
{
    STORE(count, s->gpu_count);
    return NVML_SUCCESS;
}

/* -- devices -------------------------------------------------------------------------------- */

static int handle_by_index(struct sim_state *s, unsigned index, uintptr_t *device)
{
    if (index >= s->gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    STORE(device, encode(KIND_DEVICE, index, 0, 0));
    return NVML_SUCCESS;
}

static int handle_by_uuid(struct sim_state *s, const char *wanted, uintptr_t *device)
{
    if (wanted == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < s->gpu_count; i++) {
        struct sim_gpu *gpu = &s->gpus[i];
        struct sim_gi *gi;
        struct sim_ci *ci;
        char uuid[41];
        if (strcmp(gpu->uuid, wanted) == 0) {
            STORE(device, encode(KIND_DEVICE, gpu->index, 0, 0));
            return NVML_SUCCESS;
        }
        for (unsigned m = 0; gpu->mig_current && mig_device_at(gpu, m, &gi, &ci); m++) {
            mig_uuid(gpu, gi, ci, uuid);
            if (strcmp(uuid, wanted) == 0) {
                STORE(device, encode(KIND_MIG_DEVICE, gpu->index, gi->id, ci->id));
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static int device_name(struct sim_state *s, uintptr_t device, char *buffer, unsigned length)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    const struct sim_model *model;
    const struct sim_profile *profile;
    char name[256], suffix[128];
    int rc = gpu_of(s, device, KINDS(KIND_DEVICE, KIND_MIG_DEVICE), &gpu);
    if (rc == NVML_SUCCESS)
        rc = model_of(gpu, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    snprintf(name, sizeof(name), "%s", model->nvml_names[0]);
    if (decode(device).kind == KIND_MIG_DEVICE) {
        rc = compute_instance(s, device, KIND_MIG_DEVICE, &gpu, &gi, &ci);
        if (rc == NVML_SUCCESS)
            rc = gi_profile(gpu, gi, &profile);
        if (rc == NVML_SUCCESS)
            rc = ci_name(profile, ci->profile_id, suffix, sizeof(suffix));
        if (rc != NVML_SUCCESS)
            return rc;
        snprintf(name, sizeof(name), "%s %s", model->nvml_names[0], suffix);
    }
    return write_string(buffer, length, name);
}

static int device_uuid(struct sim_state *s, uintptr_t device, char *buffer, unsigned length)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    char uuid[96];
    int rc = gpu_of(s, device, KINDS(KIND_DEVICE, KIND_MIG_DEVICE), &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    snprintf(uuid, sizeof(uuid), "%s", gpu->uuid);
    if (decode(device).kind == KIND_MIG_DEVICE) {
        rc = compute_instance(s, device, KIND_MIG_DEVICE, &gpu, &gi, &ci);
        if (rc != NVML_SUCCESS)
            return rc;
        mig_uuid(gpu, gi, ci, uuid);
    }
    return write_string(buffer, length, uuid);
}

static int device_index(struct sim_state *s, uintptr_t device, unsigned *index)
{
    struct sim_gpu *gpu;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(index, gpu->index);
    return NVML_SUCCESS;
}

static int compute_capability(struct sim_state *s, uintptr_t device, int *major, int *minor)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    int rc = gpu_of(s, device, KINDS(KIND_DEVICE, KIND_MIG_DEVICE), &gpu);
    if (rc == NVML_SUCCESS)
        rc = model_of(gpu, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    if (model->cc_major == 0 && model->cc_minor == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    STORE(major, (int)model->cc_major);
    STORE(minor, (int)model->cc_minor);
    return NVML_SUCCESS;
}

static int pci_info(struct sim_state *s, uintptr_t device, nvmlPciInfo_t *info)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    unsigned domain, bus, slot, function;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sscanf(gpu->pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4)
        return NVML_ERROR_UNKNOWN;
    rc = model_of(gpu, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    const char *bus_text = strchr(gpu->pci_bus_id, ':') + 1; /* "BB:DD.F" as written */
    snprintf(info->busId, sizeof(info->busId), "%s", gpu->pci_bus_id);
    snprintf(info->busIdLegacy, sizeof(info->busIdLegacy), "%04x:%s", domain & 0xFFFF, bus_text);
    info->domain = domain;
    info->bus = bus;
    info->device = slot;
    info->pciDeviceId = model->pci_device_id;
    info->pciSubSystemId = 0;
    return NVML_SUCCESS;
}

static int memory_mib(struct sim_state *s, uintptr_t device, unsigned long long *mib)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    const struct sim_model *model;
    const struct sim_profile *profile;
    int rc = gpu_of(s, device, KINDS(KIND_DEVICE, KIND_MIG_DEVICE), &gpu);
    if (rc == NVML_SUCCESS)
        rc = model_of(gpu, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    *mib = model->memory_mib;
    if (decode(device).kind == KIND_MIG_DEVICE) {
        rc = compute_instance(s, device, KIND_MIG_DEVICE, &gpu, &gi, &ci);
        if (rc == NVML_SUCCESS)
            rc = gi_profile(gpu, gi, &profile);
        if (rc != NVML_SUCCESS)
            return rc;
        *mib = profile->memory_mib;
    }
    return NVML_SUCCESS;
}

static int memory_info(struct sim_state *s, uintptr_t device, nvmlMemory_t *memory)
{
    unsigned long long mib;
    int rc = memory_mib(s, device, &mib);
    if (rc != NVML_SUCCESS)
        return rc;
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = memory->free = mib << 20;
    memory->used = 0;
    return NVML_SUCCESS;
}

static int memory_info_v2(struct sim_state *s, uintptr_t device, nvmlMemory_v2_t *memory)
{
    unsigned long long mib;
    int rc = memory_mib(s, device, &mib);
    if (rc != NVML_SUCCESS)
        return rc;
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != MEMORY_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = memory->free = mib << 20;
    memory->used = 0;
    return NVML_SUCCESS;
}

static int minor_number(struct sim_state *s, uintptr_t device, unsigned *minor)
{
    struct sim_gpu *gpu;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(minor, gpu->index);
    return NVML_SUCCESS;
}

/* nvmlDeviceGetTopologyCommonAncestor: where the PCIe paths of two GPUs meet (nvml.h
 * nvmlGpuTopologyLevel_t). The simulated machine has no PCIe tree, so every pair of GPUs meets at
 * the farthest level, the system (NVML_TOPOLOGY_SYSTEM, across the CPU interconnect), and a GPU
 * with itself at the nearest (NVML_TOPOLOGY_INTERNAL). NVIDIA's device plugin asks it for every
 * pair of full GPUs before it prefers an allocation (go-gpuallocator internal/links GetP2PLink),
 * and fails the pod's admission when it is not served. MIG devices have no PCIe path. */
enum { NVML_TOPOLOGY_INTERNAL = 0, NVML_TOPOLOGY_SYSTEM = 50 };

static int topology_common_ancestor(struct sim_state *s, uintptr_t device1, uintptr_t device2, int *level)
{
    struct sim_gpu *first, *second;
    int rc = gpu_of(s, device1, 1u << KIND_DEVICE, &first);
    if (rc == NVML_SUCCESS)
        rc = gpu_of(s, device2, 1u << KIND_DEVICE, &second);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(level, first == second ? NVML_TOPOLOGY_INTERNAL : NVML_TOPOLOGY_SYSTEM);
    return NVML_SUCCESS;
}

/* -- MIG mode and GPU-instance profiles ----------------------------------------------------- */

static int mig_mode(struct sim_state *s, uintptr_t device, unsigned *current, unsigned *pending)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc == NVML_SUCCESS)
        rc = mig_model(gpu, 0, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(current, (unsigned)gpu->mig_current);
    STORE(pending, (unsigned)gpu->mig_pending);
    return NVML_SUCCESS;
}

static void fill_profile_info(const struct sim_profile *p, unsigned *id, unsigned *p2p,
                              unsigned *slices, unsigned *instances, unsigned *counts,
                              unsigned long long *memory)
{
    *id = p->id;
    *p2p = 0;
    *slices = p->compute_slices;
    *instances = p->max_instances;
    /* The catalog holds no SM or engine counts: multiprocessor, copy engine, decoder, encoder,
     * JPEG and OFA counts stay 0, as in the Python simulator. */
    memset(counts, 0, 6 * sizeof(unsigned));
    *memory = p->memory_mib;
}

static int profile_by_constant(struct sim_state *s, uintptr_t device, unsigned constant,
                               const struct sim_profile **profile)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc == NVML_SUCCESS)
        rc = mig_model(gpu, 0, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    if (constant >= GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < model->profile_count; i++)
        if (model->profiles[i].constant == constant) {
            *profile = &model->profiles[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_SUPPORTED;
}

static int profile_info(struct sim_state *s, uintptr_t device, unsigned constant,
                        nvmlGpuInstanceProfileInfo_t *info)
{
    const struct sim_profile *p;
    int rc = profile_by_constant(s, device, constant, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    fill_profile_info(p, &info->id, &info->isP2pSupported, &info->sliceCount,
                      &info->instanceCount, &info->multiprocessorCount, &info->memorySizeMB);
    return NVML_SUCCESS;
}

static int fill_profile_info_v2(const struct sim_profile *p, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != GPU_INSTANCE_PROFILE_INFO_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    fill_profile_info(p, &info->id, &info->isP2pSupported, &info->sliceCount,
                      &info->instanceCount, &info->multiprocessorCount, &info->memorySizeMB);
    snprintf(info->name, sizeof(info->name), "MIG %s", p->name);
    return NVML_SUCCESS;
}

static int profile_info_v(struct sim_state *s, uintptr_t device, unsigned constant,
                          nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const struct sim_profile *p;
    int rc = profile_by_constant(s, device, constant, &p);
    return rc == NVML_SUCCESS ? fill_profile_info_v2(p, info) : rc;
}

/* The profile `id` of a MIG-capable GPU (enabled: MIG must be on now). */
static int gpu_profile(struct sim_state *s, uintptr_t device, unsigned id, int enabled,
                       struct sim_gpu **gpu, const struct sim_model **model,
                       const struct sim_profile **profile)
{
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, gpu);
    if (rc == NVML_SUCCESS)
        rc = mig_model(*gpu, enabled, model);
    if (rc != NVML_SUCCESS)
        return rc;
    *profile = catalog_profile(*model, id);
    return *profile ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

static int profile_info_by_id(struct sim_state *s, uintptr_t device, unsigned id,
                              nvmlGpuInstanceProfileInfo_v2_t *info)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    const struct sim_profile *p;
    int rc = gpu_profile(s, device, id, 0, &gpu, &model, &p);
    return rc == NVML_SUCCESS ? fill_profile_info_v2(p, info) : rc;
}

static int possible_placements(struct sim_state *s, uintptr_t device, unsigned id,
                               nvmlPlacement_t *placements, unsigned *count)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    const struct sim_profile *p;
    int rc = gpu_profile(s, device, id, 0, &gpu, &model, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    /* _write_array: the count is stored first; NULL asks only for it; the input count is not
     * read (nvml.h: the buffer must hold every placement the profile has). */
    STORE(count, p->placement_count);
    for (unsigned i = 0; placements && i < p->placement_count; i++)
        placements[i] = (nvmlPlacement_t){p->placements[i].start, p->placements[i].size};
    return NVML_SUCCESS;
}

/* The placements of profile `p` a new GI could take now, lowest start first, into `out`: none
 * when the profile is at its maximum count or the compute slices are spent, else the profile's placements that overlap no existing GI ("Creation
 * of new GPU instance will fail if there is overlap with the already occupied memory slices",
 * NVML docs). *used gets the compute slices in use, *same the GIs of this profile; -1 when a GI
 * has a profile the model lacks. */
static int free_placements(const struct sim_gpu *gpu, const struct sim_model *model,
                           const struct sim_profile *p, struct sim_placement *out,
                           unsigned *used, unsigned *same)
{
    unsigned char occupied[64] = {0};
    int count = 0;
    *used = *same = 0;
    for (unsigned i = 0; i < gpu->gi_count; i++) {
        const struct sim_profile *other = catalog_profile(model, gpu->gis[i].profile_id);
        if (other == NULL)
            return -1;
        *same += gpu->gis[i].profile_id == p->id;
        *used += other->compute_slices;
        for (unsigned slot = gpu->gis[i].start; slot < gpu->gis[i].start + gpu->gis[i].size; slot++)
            occupied[slot % 64] = 1;
    }
    if (*same >= p->max_instances || *used + p->compute_slices > model->compute_slices)
        return 0;
    for (unsigned i = 0; i < p->placement_count; i++) {
        unsigned clash = 0;
        for (unsigned slot = p->placements[i].start;
             slot < p->placements[i].start + p->placements[i].size; slot++)
            clash |= occupied[slot % 64];
        if (!clash)
            out[count++] = p->placements[i];
    }
    return count;
}

/* How many more GIs of the profile fit: free placements, count left, compute left (_capacity). */
static int remaining_capacity(struct sim_state *s, uintptr_t device, unsigned id, unsigned *count)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    const struct sim_profile *p;
    struct sim_placement free[64];
    unsigned used, same, capacity = 0;
    int n, rc = gpu_profile(s, device, id, 1, &gpu, &model, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    n = free_placements(gpu, model, p, free, &used, &same);
    if (n < 0)
        return NVML_ERROR_UNKNOWN;
    if (n > 0) {
        unsigned left = p->max_instances - same;
        unsigned fits = (model->compute_slices - used) / p->compute_slices;
        capacity = (unsigned)n < left ? (unsigned)n : left;
        capacity = capacity < fits ? capacity : fits;
    }
    STORE(count, capacity);
    return NVML_SUCCESS;
}

/* -- GPU and compute instances -------------------------------------------------------------- */

static int gpu_instances(struct sim_state *s, uintptr_t device, unsigned id, uintptr_t *out,
                         unsigned *count)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    const struct sim_profile *p;
    unsigned found = 0;
    int rc = gpu_profile(s, device, id, 1, &gpu, &model, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned i = 0; i < gpu->gi_count; i++)
        found += gpu->gis[i].profile_id == p->id;
    STORE(count, found);
    for (unsigned i = 0, n = 0; out && i < gpu->gi_count; i++)
        if (gpu->gis[i].profile_id == p->id)
            out[n++] = encode(KIND_GPU_INSTANCE, gpu->index, gpu->gis[i].id, 0);
    return NVML_SUCCESS;
}

static int gpu_instance_by_id(struct sim_state *s, uintptr_t device, unsigned id, uintptr_t *out)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc == NVML_SUCCESS)
        rc = mig_model(gpu, 1, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned i = 0; i < gpu->gi_count; i++)
        if (gpu->gis[i].id == id) {
            STORE(out, encode(KIND_GPU_INSTANCE, gpu->index, id, 0));
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

static int gpu_instance_info(struct sim_state *s, uintptr_t instance, nvmlGpuInstanceInfo_t *info)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    int rc = gpu_instance(s, instance, &gpu, &gi);
    if (rc != NVML_SUCCESS)
        return rc;
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    info->device = encode(KIND_DEVICE, gpu->index, 0, 0);
    info->id = gi->id;
    info->profileId = gi->profile_id;
    info->placement = (nvmlPlacement_t){gi->start, gi->size};
    return NVML_SUCCESS;
}

/* (slices, count) of CI profile `constant` inside a GI (_Driver._ci_profile). */
static int ci_profile(const struct sim_gpu *gpu, const struct sim_gi *gi, unsigned constant,
                      unsigned *slices, unsigned *count)
{
    const struct sim_profile *p;
    int rc;
    if (constant >= COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    int known = catalog_ci_slices(constant, slices);
    rc = gi_profile(gpu, gi, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!known || *slices > p->compute_slices)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = p->compute_slices / *slices;
    return NVML_SUCCESS;
}

static int ci_profile_info(struct sim_state *s, uintptr_t instance, unsigned constant,
                           unsigned engine, nvmlComputeInstanceProfileInfo_t *info)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    unsigned slices, count;
    int rc = gpu_instance(s, instance, &gpu, &gi);
    if (rc != NVML_SUCCESS)
        return rc;
    if (engine != COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = ci_profile(gpu, gi, constant, &slices, &count);
    if (rc != NVML_SUCCESS)
        return rc;
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof(*info));
    info->id = constant;
    info->sliceCount = slices;
    info->instanceCount = count;
    return NVML_SUCCESS;
}

static int ci_profile_info_v(struct sim_state *s, uintptr_t instance, unsigned constant,
                             unsigned engine, nvmlComputeInstanceProfileInfo_v2_t *info)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    const struct sim_profile *p;
    unsigned slices, count;
    int rc = gpu_instance(s, instance, &gpu, &gi);
    if (rc != NVML_SUCCESS)
        return rc;
    if (engine != COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = ci_profile(gpu, gi, constant, &slices, &count);
    if (rc != NVML_SUCCESS)
        return rc;
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != COMPUTE_INSTANCE_PROFILE_INFO_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    info->id = constant;
    info->sliceCount = slices;
    info->instanceCount = count;
    info->multiprocessorCount = info->sharedCopyEngineCount = info->sharedDecoderCount = 0;
    info->sharedEncoderCount = info->sharedJpegCount = info->sharedOfaCount = 0;
    rc = gi_profile(gpu, gi, &p);
    if (rc == NVML_SUCCESS)
        rc = ci_name(p, constant, info->name, sizeof(info->name));
    return rc;
}

static int compute_instances(struct sim_state *s, uintptr_t instance, unsigned constant,
                             uintptr_t *out, unsigned *count)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    unsigned slices, most, found = 0;
    int rc = gpu_instance(s, instance, &gpu, &gi);
    if (rc == NVML_SUCCESS)
        rc = ci_profile(gpu, gi, constant, &slices, &most);
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned i = 0; i < gi->ci_count; i++)
        found += gi->cis[i].profile_id == constant;
    STORE(count, found);
    for (unsigned i = 0, n = 0; out && i < gi->ci_count; i++)
        if (gi->cis[i].profile_id == constant)
            out[n++] = encode(KIND_COMPUTE_INSTANCE, gpu->index, gi->id, gi->cis[i].id);
    return NVML_SUCCESS;
}

static int compute_instance_by_id(struct sim_state *s, uintptr_t instance, unsigned id,
                                  uintptr_t *out)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    int rc = gpu_instance(s, instance, &gpu, &gi);
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned i = 0; i < gi->ci_count; i++)
        if (gi->cis[i].id == id) {
            STORE(out, encode(KIND_COMPUTE_INSTANCE, gpu->index, gi->id, id));
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

static int compute_instance_info(struct sim_state *s, uintptr_t instance,
                                 nvmlComputeInstanceInfo_t *info)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    int rc = compute_instance(s, instance, KIND_COMPUTE_INSTANCE, &gpu, &gi, &ci);
    if (rc != NVML_SUCCESS)
        return rc;
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    info->device = encode(KIND_DEVICE, gpu->index, 0, 0);
    info->gpuInstance = encode(KIND_GPU_INSTANCE, gpu->index, gi->id, 0);
    info->id = ci->id;
    info->profileId = ci->profile_id;
    info->placement = (nvmlPlacement_t){ci->start, ci->size};
    return NVML_SUCCESS;
}

/* -- MIG devices ---------------------------------------------------------------------------- */

static int max_mig_device_count(struct sim_state *s, uintptr_t device, unsigned *count)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc == NVML_SUCCESS)
        rc = mig_model(gpu, 0, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(count, gpu->mig_current ? model->compute_slices : 0);
    return NVML_SUCCESS;
}

static int mig_device_handle(struct sim_state *s, uintptr_t device, unsigned index, uintptr_t *out)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    const struct sim_model *model;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc == NVML_SUCCESS)
        rc = mig_model(gpu, 1, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    if (index >= model->compute_slices)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_device_at(gpu, index, &gi, &ci))
        return NVML_ERROR_NOT_FOUND;
    STORE(out, encode(KIND_MIG_DEVICE, gpu->index, gi->id, ci->id));
    return NVML_SUCCESS;
}

static int is_mig_device(struct sim_state *s, uintptr_t device, unsigned *out)
{
    struct sim_gpu *gpu;
    int rc = gpu_of(s, device, KINDS(KIND_DEVICE, KIND_MIG_DEVICE), &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(out, decode(device).kind == KIND_MIG_DEVICE);
    return NVML_SUCCESS;
}

static int gpu_instance_id(struct sim_state *s, uintptr_t device, unsigned *out)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    int rc = mig_device(s, device, &gpu, &gi, &ci);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(out, gi->id);
    return NVML_SUCCESS;
}

static int compute_instance_id(struct sim_state *s, uintptr_t device, unsigned *out)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    int rc = mig_device(s, device, &gpu, &gi, &ci);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(out, ci->id);
    return NVML_SUCCESS;
}

static int parent_device(struct sim_state *s, uintptr_t device, uintptr_t *out)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    int rc = mig_device(s, device, &gpu, &gi, &ci);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(out, encode(KIND_DEVICE, gpu->index, 0, 0));
    return NVML_SUCCESS;
}

static int device_attributes(struct sim_state *s, uintptr_t device, nvmlDeviceAttributes_t *out)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    const struct sim_profile *p;
    unsigned slices;
    int rc = mig_device(s, device, &gpu, &gi, &ci);
    if (rc != NVML_SUCCESS)
        return rc;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = gi_profile(gpu, gi, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!catalog_ci_slices(ci->profile_id, &slices))
        return NVML_ERROR_UNKNOWN;
    memset(out, 0, sizeof(*out));
    out->gpuInstanceSliceCount = p->compute_slices;
    out->computeInstanceSliceCount = slices;
    out->memorySizeMB = p->memory_mib;
    return NVML_SUCCESS;
}

/* -- health: ECC counts, row remapping, retired pages ---------------------------------------------- */

static int ecc_count(struct sim_state *s, uintptr_t device, int type, int counter,
                     unsigned long long *out)
{
    struct sim_gpu *gpu;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    if (type < 0 || type > 1 || counter < 0 || counter > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = gpu->health.ecc[type][counter].value; /* 64 bits at most: see sim_count */
    return NVML_SUCCESS;
}

static int total_ecc_errors(struct sim_state *s, uintptr_t device, int type, int counter,
                            unsigned long long *count)
{
    unsigned long long errors;
    int rc = ecc_count(s, device, type, counter, &errors);
    if (rc == NVML_SUCCESS)
        STORE(count, errors);
    return rc;
}

static int memory_error_counter(struct sim_state *s, uintptr_t device, int type, int counter,
                                int location, unsigned long long *count)
{
    unsigned long long errors;
    int rc;
    if (location < 0 || location >= MEMORY_LOCATION_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = ecc_count(s, device, type, counter, &errors);
    if (rc == NVML_SUCCESS)
        STORE(count, location == MEMORY_LOCATION_DRAM ? errors : 0ULL);
    return rc;
}

/* NVML reports remapped rows in an unsigned int: a larger count reads as the largest it can
 * hold, never as the count modulo 2**32. */
static unsigned clamp32(unsigned long long value) { return value > UINT_MAX ? UINT_MAX : (unsigned)value; }

static int remapped_rows(struct sim_state *s, uintptr_t device, unsigned *corrected,
                         unsigned *uncorrected, unsigned *pending, unsigned *failure)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc == NVML_SUCCESS)
        rc = model_of(gpu, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    if (model->memory_repair != REPAIR_ROW_REMAPPING || (gpu->mig_current && gpu->gi_count))
        return NVML_ERROR_NOT_SUPPORTED;
    STORE(corrected, clamp32(gpu->health.remap_corrected.value));
    STORE(uncorrected, clamp32(gpu->health.remap_uncorrected.value));
    STORE(pending, (unsigned)gpu->health.remap_pending);
    STORE(failure, (unsigned)gpu->health.remap_failure);
    return NVML_SUCCESS;
}

static int page_retirement(struct sim_state *s, uintptr_t device, struct sim_gpu **gpu)
{
    const struct sim_model *model;
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, gpu);
    if (rc == NVML_SUCCESS)
        rc = model_of(*gpu, &model);
    if (rc == NVML_SUCCESS && model->memory_repair != REPAIR_PAGE_RETIREMENT)
        rc = NVML_ERROR_NOT_SUPPORTED;
    return rc;
}

static int retired_pages_pending(struct sim_state *s, uintptr_t device, int *pending)
{
    struct sim_gpu *gpu;
    int rc = page_retirement(s, device, &gpu);
    if (rc == NVML_SUCCESS)
        STORE(pending, gpu->health.pages_pending);
    return rc;
}

/* nvml.h: *count in is the buffers' size, out the number of pages; too small (0 with no buffer
 * asks for the size) is INSUFFICIENT_SIZE with the count set. */
static int retired_pages(struct sim_state *s, uintptr_t device, int cause, unsigned *count,
                         unsigned long long *addresses, unsigned long long *timestamps)
{
    struct sim_gpu *gpu;
    unsigned room, n;
    int rc = page_retirement(s, device, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    if (cause < 0 || cause > 1 || count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    room = *count;
    n = gpu->health.page_count[cause];
    *count = n;
    if (room < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned i = 0; i < n; i++) {
        if (addresses)
            addresses[i] = gpu->health.pages[cause][i].address;
        if (timestamps)
            timestamps[i] = gpu->health.pages[cause][i].timestamp;
    }
    return NVML_SUCCESS;
}

/* -- changes: MIG mode, GPU and compute instances ---------------------------------------- */

/* Only the pending mode changes; it becomes current at a GPU reset or a reboot. The activation
 * status says why it is not current yet: IN_USE while a client holds the GPU, RESET_REQUIRED
 * otherwise (nvmlDeviceSetMigMode docs: "activationStatus would return
 * NVML_ERROR_RESET_REQUIRED ... NVML_ERROR_IN_USE ... if the device isn't idle"). */
static int set_mig_mode(struct sim_state *s, uintptr_t device, unsigned mode, int *activation)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    char holder[NAME_SIZE];
    int rc = gpu_of(s, device, 1u << KIND_DEVICE, &gpu);
    if (rc == NVML_SUCCESS)
        rc = mig_model(gpu, 0, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    if (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mode == NVML_DEVICE_MIG_DISABLE && gpu->mig_current && gpu->gi_count)
        return NVML_ERROR_IN_USE;
    if (activation == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    gpu->mig_pending = (int)mode;
    if (gpu->mig_pending == gpu->mig_current)
        *activation = NVML_SUCCESS;
    else if (state_held(gpu, holder, sizeof(holder)))
        *activation = NVML_ERROR_IN_USE;
    else
        *activation = NVML_ERROR_RESET_REQUIRED;
    return NVML_SUCCESS;
}

/* The GI id NVML gives a placement: its node in a binary tree over the memory slots. Real
 * captures number GIs by where they sit, not by creation order: 7g -> 0, 3g at 0/4 -> 1/2, 2g
 * at 0/2/4 -> 3/4/5, 1g at slot k -> 7+k (NVIDIA/DCGM#138, NVIDIA/go-nvml#146,
 * kubernetes-sigs/dra-driver-nvidia-gpu#933). */
static unsigned gpu_instance_id_at(const struct sim_gpu *gpu, const struct sim_model *model,
                                   struct sim_placement where)
{
    unsigned slots = model->memory_slots, node = slots / where.size - 1 + where.start / where.size;
    int taken = 0;
    for (unsigned i = 0; i < gpu->gi_count; i++)
        taken |= gpu->gis[i].id == node;
    if (slots % where.size == 0 && where.start % where.size == 0 && !taken)
        return node;
    for (unsigned id = 1;; id++) {
        taken = 0;
        for (unsigned i = 0; i < gpu->gi_count; i++)
            taken |= gpu->gis[i].id == id;
        if (!taken)
            return id;
    }
}

static int by_id(const void *a, const void *b)
{
    unsigned x = ((const struct sim_gi *)a)->id, y = ((const struct sim_gi *)b)->id;
    return (x > y) - (x < y);
}

static int by_ci(const void *a, const void *b)
{
    unsigned x = ((const struct sim_ci *)a)->id, y = ((const struct sim_ci *)b)->id;
    return (x > y) - (x < y);
}

/* nvmlDeviceCreateGpuInstance (wanted NULL) and ...WithPlacement. Without a placement NVML's
 * choice is undocumented; one real capture put the first of two 3g GIs at 4:4 (nvidia-smi mig
 * -lgipp; NVIDIA MIG User Guide), so the simulation takes the highest free start. */
static int create_gpu_instance(struct sim_state *s, uintptr_t device, unsigned id, int placed,
                               const nvmlPlacement_t *wanted, uintptr_t *instance)
{
    struct sim_gpu *gpu;
    const struct sim_model *model;
    const struct sim_profile *p;
    struct sim_placement free[64], where;
    unsigned used, same;
    int n, found = 0, rc = gpu_profile(s, device, id, 1, &gpu, &model, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    if (placed && wanted == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    n = free_placements(gpu, model, p, free, &used, &same);
    if (n < 0)
        return NVML_ERROR_UNKNOWN;
    if (!placed && n > 0) {
        where = free[n - 1];
        found = 1;
    }
    for (int i = 0; placed && i < n; i++)
        if (free[i].start == wanted->start && free[i].size == wanted->size) {
            where = free[i];
            found = 1;
        }
    if (!found || gpu->gi_count == MAX_GIS)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (instance == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    gpu->gis[gpu->gi_count] =
        (struct sim_gi){gpu_instance_id_at(gpu, model, where), p->id, where.start, where.size, 0,
                        {{0, 0, 0, 0}}};
    *instance = encode(KIND_GPU_INSTANCE, gpu->index, gpu->gis[gpu->gi_count].id, 0);
    gpu->gi_count++;
    qsort(gpu->gis, gpu->gi_count, sizeof(gpu->gis[0]), by_id);
    return NVML_SUCCESS;
}

static int destroy_gpu_instance(struct sim_state *s, uintptr_t instance)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    int rc = gpu_instance(s, instance, &gpu, &gi);
    if (rc != NVML_SUCCESS)
        return rc;
    if (gi->ci_count) /* nvml.h: IN_USE "if ... compute instances are active on the GPU instance" */
        return NVML_ERROR_IN_USE;
    memmove(gi, gi + 1, (size_t)(gpu->gis + gpu->gi_count - (gi + 1)) * sizeof(*gi));
    gpu->gi_count--;
    return NVML_SUCCESS;
}

/* A CI of `constant` at the lowest free start of its size inside the GI, with the lowest free
 * id. */
static int create_compute_instance(struct sim_state *s, uintptr_t instance, unsigned constant,
                                   uintptr_t *out)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    const struct sim_profile *p;
    unsigned slices, most, same = 0, used = 0, start = 0, id = 0;
    int rc = gpu_instance(s, instance, &gpu, &gi), found = 0;
    if (rc == NVML_SUCCESS)
        rc = ci_profile(gpu, gi, constant, &slices, &most);
    if (rc == NVML_SUCCESS)
        rc = gi_profile(gpu, gi, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned i = 0; i < gi->ci_count; i++) {
        same += gi->cis[i].profile_id == constant;
        for (unsigned k = gi->cis[i].start; k < gi->cis[i].start + gi->cis[i].size && k < 32; k++)
            used |= 1u << k;
    }
    for (unsigned at = 0; !found && at + slices <= p->compute_slices; at += slices)
        if ((used & ((1u << slices) - 1) << at) == 0) {
            start = at;
            found = 1;
        }
    if (same >= most || !found || gi->ci_count == MAX_CIS)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int taken = 1; taken; id += taken) {
        taken = 0;
        for (unsigned i = 0; i < gi->ci_count; i++)
            taken |= gi->cis[i].id == id;
    }
    gi->cis[gi->ci_count++] = (struct sim_ci){id, constant, start, slices};
    qsort(gi->cis, gi->ci_count, sizeof(gi->cis[0]), by_ci);
    *out = encode(KIND_COMPUTE_INSTANCE, gpu->index, gi->id, id);
    return NVML_SUCCESS;
}

static int destroy_compute_instance(struct sim_state *s, uintptr_t instance)
{
    struct sim_gpu *gpu;
    struct sim_gi *gi;
    struct sim_ci *ci;
    int rc = compute_instance(s, instance, KIND_COMPUTE_INSTANCE, &gpu, &gi, &ci);
    if (rc != NVML_SUCCESS)
        return rc;
    memmove(ci, ci + 1, (size_t)(gi->cis + gi->ci_count - (ci + 1)) * sizeof(*ci));
    gi->ci_count--;
    return NVML_SUCCESS;
}

/* -- events (events.h) ---------------------------------------------------------------------- */

static int event_set_create(struct sim_state *s, nvmlEventSet_t *set)
{
    (void)s;
    return events_create(set);
}

static int event_set_free(struct sim_state *s, nvmlEventSet_t set)
{
    (void)s;
    return events_free(set);
}

/* Events are per GPU: nvml.h "This API does not currently support per-instance event reporting
 * using MIG device handles" (nvmlEventSetWait_v2); the plugins register the parent GPU. */
static int event_gpu(struct sim_state *s, uintptr_t device, struct sim_gpu **gpu)
{
    int rc = gpu_of(s, device, KINDS(KIND_DEVICE, KIND_MIG_DEVICE), gpu);
    if (rc == NVML_SUCCESS && decode(device).kind == KIND_MIG_DEVICE)
        rc = NVML_ERROR_NOT_SUPPORTED;
    return rc;
}

static int supported_event_types(struct sim_state *s, uintptr_t device, unsigned long long *types)
{
    struct sim_gpu *gpu;
    int rc = event_gpu(s, device, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    STORE(types, SUPPORTED_EVENTS);
    return NVML_SUCCESS;
}

/* nvmlDeviceRegisterEvents: NOT_SUPPORTED "if the platform does not support this feature or
 * some of requested event types", and then none of them is registered. */
static int register_events(struct sim_state *s, uintptr_t device, unsigned long long types,
                           nvmlEventSet_t set)
{
    struct sim_gpu *gpu;
    int rc = event_gpu(s, device, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!events_valid(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED;
    return events_register(set, state_path(), gpu->index, types);
}

/* nvmlEventSetWait_v2: the next event, or TIMEOUT once `timeout` ms have passed without one.
 * `v2` writes the MIG instance ids too (0xFFFFFFFF when the event is the whole GPU's). */
static int event_set_wait(struct sim_state *s, nvmlEventSet_t set, void *data, unsigned timeout,
                          int v2)
{
    struct sim_event e;
    int rc;
    (void)s;
    if (!events_valid(set) || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = events_wait(set, timeout, &e);
    if (rc != NVML_SUCCESS)
        return rc;
    if (v2) {
        nvmlEventData_t *out = data;
        *out = (nvmlEventData_t){encode(KIND_DEVICE, e.gpu, 0, 0), e.type, e.data,
                                 e.gpu_instance, e.compute_instance};
    } else {
        nvmlEventData_v1_t *out = data;
        *out = (nvmlEventData_v1_t){encode(KIND_DEVICE, e.gpu, 0, 0), e.type, e.data};
    }
    return NVML_SUCCESS;
}

/* -- the exported C ABI --------------------------------------------------------------------- */

static int init(const char *symbol)
{
    struct frame c;
    int rc;
    if (access(state_path(), F_OK) != 0)
        return trace(symbol, NVML_ERROR_LIBRARY_NOT_FOUND); /* no state: no driver installed */
    rc = begin(&c, "nvmlInitWithFlags", 0);
    if (rc == NVML_SUCCESS && !c.s->loaded)
        rc = NVML_ERROR_DRIVER_NOT_LOADED;
    if (rc == NVML_SUCCESS)
        __atomic_add_fetch(&initialized, 1, __ATOMIC_SEQ_CST);
    return finish(&c, symbol, rc);
}

EXPORT int nvmlInitWithFlags(unsigned flags)
{
    (void)flags;
    return init("nvmlInitWithFlags");
}
EXPORT int nvmlInit_v2(void) { return init("nvmlInit_v2"); }
EXPORT int nvmlInit(void) { return init("nvmlInit"); }

EXPORT int nvmlShutdown(void)
{
    int count = __atomic_load_n(&initialized, __ATOMIC_SEQ_CST);
    while (count > 0 && !__atomic_compare_exchange_n(&initialized, &count, count - 1, 0,
                                                     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    return trace("nvmlShutdown", count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED);
}

EXPORT const char *nvmlErrorString(int code)
{
    static __thread char unknown[48];
    const char *text = catalog_error_text(code);
    trace("nvmlErrorString", NVML_SUCCESS);
    if (text != NULL)
        return text;
    snprintf(unknown, sizeof(unknown), "Unknown Error %d", code);
    return unknown;
}

EXPORT int nvmlSystemGetDriverVersion(char *version, unsigned length)
    SERVED(nvmlSystemGetDriverVersion, nvmlSystemGetDriverVersion, driver_version(s, version, length))
EXPORT int nvmlSystemGetNVMLVersion(char *version, unsigned length)
    SERVED(nvmlSystemGetNVMLVersion, nvmlSystemGetNVMLVersion, nvml_version(s, version, length))
EXPORT int nvmlSystemGetCudaDriverVersion(int *version)
    SERVED(nvmlSystemGetCudaDriverVersion, nvmlSystemGetCudaDriverVersion, cuda_driver_version(s, version))
EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *version)
    SERVED(nvmlSystemGetCudaDriverVersion_v2, nvmlSystemGetCudaDriverVersion_v2, cuda_driver_version(s, version))

EXPORT int nvmlDeviceGetCount_v2(unsigned *count)
    SERVED(nvmlDeviceGetCount_v2, nvmlDeviceGetCount_v2, device_count(s, count))
EXPORT int nvmlDeviceGetCount(unsigned *count)
    SERVED(nvmlDeviceGetCount, nvmlDeviceGetCount_v2, device_count(s, count))
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, uintptr_t *device)
    SERVED(nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetHandleByIndex_v2, handle_by_index(s, index, device))
EXPORT int nvmlDeviceGetHandleByIndex(unsigned index, uintptr_t *device)
    SERVED(nvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByIndex_v2, handle_by_index(s, index, device))
EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, uintptr_t *device)
    SERVED(nvmlDeviceGetHandleByUUID, nvmlDeviceGetHandleByUUID, handle_by_uuid(s, uuid, device))
EXPORT int nvmlDeviceGetName(uintptr_t device, char *name, unsigned length)
    SERVED(nvmlDeviceGetName, nvmlDeviceGetName, device_name(s, device, name, length))
EXPORT int nvmlDeviceGetUUID(uintptr_t device, char *uuid, unsigned length)
    SERVED(nvmlDeviceGetUUID, nvmlDeviceGetUUID, device_uuid(s, device, uuid, length))
EXPORT int nvmlDeviceGetIndex(uintptr_t device, unsigned *index)
    SERVED(nvmlDeviceGetIndex, nvmlDeviceGetIndex, device_index(s, device, index))
EXPORT int nvmlDeviceGetMinorNumber(uintptr_t device, unsigned *minor)
    SERVED(nvmlDeviceGetMinorNumber, nvmlDeviceGetMinorNumber, minor_number(s, device, minor))
EXPORT int nvmlDeviceGetCudaComputeCapability(uintptr_t device, int *major, int *minor)
    SERVED(nvmlDeviceGetCudaComputeCapability, nvmlDeviceGetCudaComputeCapability, compute_capability(s, device, major, minor))
EXPORT int nvmlDeviceGetPciInfo_v3(uintptr_t device, nvmlPciInfo_t *pci)
    SERVED(nvmlDeviceGetPciInfo_v3, nvmlDeviceGetPciInfo_v3, pci_info(s, device, pci))
EXPORT int nvmlDeviceGetMemoryInfo(uintptr_t device, nvmlMemory_t *memory)
    SERVED(nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo, memory_info(s, device, memory))
EXPORT int nvmlDeviceGetMemoryInfo_v2(uintptr_t device, nvmlMemory_v2_t *memory)
    SERVED(nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2, memory_info_v2(s, device, memory))
EXPORT int nvmlDeviceGetTopologyCommonAncestor(uintptr_t device1, uintptr_t device2, int *level)
    SERVED(nvmlDeviceGetTopologyCommonAncestor, nvmlDeviceGetTopologyCommonAncestor, topology_common_ancestor(s, device1, device2, level))

EXPORT int nvmlDeviceGetMigMode(uintptr_t device, unsigned *current, unsigned *pending)
    SERVED(nvmlDeviceGetMigMode, nvmlDeviceGetMigMode, mig_mode(s, device, current, pending))
EXPORT int nvmlDeviceGetGpuInstanceProfileInfo(uintptr_t device, unsigned profile, nvmlGpuInstanceProfileInfo_t *info)
    SERVED(nvmlDeviceGetGpuInstanceProfileInfo, nvmlDeviceGetGpuInstanceProfileInfo, profile_info(s, device, profile, info))
EXPORT int nvmlDeviceGetGpuInstanceProfileInfoV(uintptr_t device, unsigned profile, nvmlGpuInstanceProfileInfo_v2_t *info)
    SERVED(nvmlDeviceGetGpuInstanceProfileInfoV, nvmlDeviceGetGpuInstanceProfileInfoV, profile_info_v(s, device, profile, info))
EXPORT int nvmlDeviceGetGpuInstanceProfileInfoByIdV(uintptr_t device, unsigned id, nvmlGpuInstanceProfileInfo_v2_t *info)
    SERVED(nvmlDeviceGetGpuInstanceProfileInfoByIdV, nvmlDeviceGetGpuInstanceProfileInfoByIdV, profile_info_by_id(s, device, id, info))
EXPORT int nvmlDeviceGetGpuInstancePossiblePlacements_v2(uintptr_t device, unsigned id, nvmlPlacement_t *placements, unsigned *count)
    SERVED(nvmlDeviceGetGpuInstancePossiblePlacements_v2, nvmlDeviceGetGpuInstancePossiblePlacements_v2, possible_placements(s, device, id, placements, count))
EXPORT int nvmlDeviceGetGpuInstanceRemainingCapacity(uintptr_t device, unsigned id, unsigned *count)
    SERVED(nvmlDeviceGetGpuInstanceRemainingCapacity, nvmlDeviceGetGpuInstanceRemainingCapacity, remaining_capacity(s, device, id, count))
EXPORT int nvmlDeviceGetGpuInstances(uintptr_t device, unsigned id, uintptr_t *instances, unsigned *count)
    SERVED(nvmlDeviceGetGpuInstances, nvmlDeviceGetGpuInstances, gpu_instances(s, device, id, instances, count))
EXPORT int nvmlDeviceGetGpuInstanceById(uintptr_t device, unsigned id, uintptr_t *instance)
    SERVED(nvmlDeviceGetGpuInstanceById, nvmlDeviceGetGpuInstanceById, gpu_instance_by_id(s, device, id, instance))
EXPORT int nvmlDeviceSetMigMode(uintptr_t device, unsigned mode, int *activation)
    SERVED(nvmlDeviceSetMigMode, nvmlDeviceSetMigMode, set_mig_mode(s, device, mode, activation))
EXPORT int nvmlDeviceCreateGpuInstance(uintptr_t device, unsigned id, uintptr_t *instance)
    SERVED(nvmlDeviceCreateGpuInstance, nvmlDeviceCreateGpuInstance, create_gpu_instance(s, device, id, 0, NULL, instance))
EXPORT int nvmlDeviceCreateGpuInstanceWithPlacement(uintptr_t device, unsigned id, const nvmlPlacement_t *placement, uintptr_t *instance)
    SERVED(nvmlDeviceCreateGpuInstanceWithPlacement, nvmlDeviceCreateGpuInstanceWithPlacement, create_gpu_instance(s, device, id, 1, placement, instance))
EXPORT int nvmlGpuInstanceDestroy(uintptr_t instance)
    SERVED(nvmlGpuInstanceDestroy, nvmlGpuInstanceDestroy, destroy_gpu_instance(s, instance))
EXPORT int nvmlGpuInstanceCreateComputeInstance(uintptr_t instance, unsigned profile, uintptr_t *out)
    SERVED(nvmlGpuInstanceCreateComputeInstance, nvmlGpuInstanceCreateComputeInstance, create_compute_instance(s, instance, profile, out))
EXPORT int nvmlComputeInstanceDestroy(uintptr_t instance)
    SERVED(nvmlComputeInstanceDestroy, nvmlComputeInstanceDestroy, destroy_compute_instance(s, instance))
EXPORT int nvmlGpuInstanceGetInfo(uintptr_t instance, nvmlGpuInstanceInfo_t *info)
    SERVED(nvmlGpuInstanceGetInfo, nvmlGpuInstanceGetInfo, gpu_instance_info(s, instance, info))
EXPORT int nvmlGpuInstanceGetComputeInstanceProfileInfo(uintptr_t instance, unsigned profile, unsigned engine, nvmlComputeInstanceProfileInfo_t *info)
    SERVED(nvmlGpuInstanceGetComputeInstanceProfileInfo, nvmlGpuInstanceGetComputeInstanceProfileInfo, ci_profile_info(s, instance, profile, engine, info))
EXPORT int nvmlGpuInstanceGetComputeInstanceProfileInfoV(uintptr_t instance, unsigned profile, unsigned engine, nvmlComputeInstanceProfileInfo_v2_t *info)
    SERVED(nvmlGpuInstanceGetComputeInstanceProfileInfoV, nvmlGpuInstanceGetComputeInstanceProfileInfoV, ci_profile_info_v(s, instance, profile, engine, info))
EXPORT int nvmlGpuInstanceGetComputeInstances(uintptr_t instance, unsigned profile, uintptr_t *instances, unsigned *count)
    SERVED(nvmlGpuInstanceGetComputeInstances, nvmlGpuInstanceGetComputeInstances, compute_instances(s, instance, profile, instances, count))
EXPORT int nvmlGpuInstanceGetComputeInstanceById(uintptr_t instance, unsigned id, uintptr_t *out)
    SERVED(nvmlGpuInstanceGetComputeInstanceById, nvmlGpuInstanceGetComputeInstanceById, compute_instance_by_id(s, instance, id, out))
EXPORT int nvmlComputeInstanceGetInfo_v2(uintptr_t instance, nvmlComputeInstanceInfo_t *info)
    SERVED(nvmlComputeInstanceGetInfo_v2, nvmlComputeInstanceGetInfo_v2, compute_instance_info(s, instance, info))

EXPORT int nvmlDeviceGetMaxMigDeviceCount(uintptr_t device, unsigned *count)
    SERVED(nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMaxMigDeviceCount, max_mig_device_count(s, device, count))
EXPORT int nvmlDeviceGetMigDeviceHandleByIndex(uintptr_t device, unsigned index, uintptr_t *mig)
    SERVED(nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetMigDeviceHandleByIndex, mig_device_handle(s, device, index, mig))
EXPORT int nvmlDeviceIsMigDeviceHandle(uintptr_t device, unsigned *is_mig)
    SERVED(nvmlDeviceIsMigDeviceHandle, nvmlDeviceIsMigDeviceHandle, is_mig_device(s, device, is_mig))
EXPORT int nvmlDeviceGetGpuInstanceId(uintptr_t device, unsigned *id)
    SERVED(nvmlDeviceGetGpuInstanceId, nvmlDeviceGetGpuInstanceId, gpu_instance_id(s, device, id))
EXPORT int nvmlDeviceGetComputeInstanceId(uintptr_t device, unsigned *id)
    SERVED(nvmlDeviceGetComputeInstanceId, nvmlDeviceGetComputeInstanceId, compute_instance_id(s, device, id))
EXPORT int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(uintptr_t device, uintptr_t *parent)
    SERVED(nvmlDeviceGetDeviceHandleFromMigDeviceHandle, nvmlDeviceGetDeviceHandleFromMigDeviceHandle, parent_device(s, device, parent))
EXPORT int nvmlDeviceGetAttributes_v2(uintptr_t device, nvmlDeviceAttributes_t *attributes)
    SERVED(nvmlDeviceGetAttributes_v2, nvmlDeviceGetAttributes_v2, device_attributes(s, device, attributes))

EXPORT int nvmlDeviceGetTotalEccErrors(uintptr_t device, int type, int counter, unsigned long long *count)
    SERVED(nvmlDeviceGetTotalEccErrors, nvmlDeviceGetTotalEccErrors, total_ecc_errors(s, device, type, counter, count))
EXPORT int nvmlDeviceGetMemoryErrorCounter(uintptr_t device, int type, int counter, int location, unsigned long long *count)
    SERVED(nvmlDeviceGetMemoryErrorCounter, nvmlDeviceGetMemoryErrorCounter, memory_error_counter(s, device, type, counter, location, count))
EXPORT int nvmlDeviceGetRemappedRows(uintptr_t device, unsigned *corrected, unsigned *uncorrected, unsigned *pending, unsigned *failure)
    SERVED(nvmlDeviceGetRemappedRows, nvmlDeviceGetRemappedRows, remapped_rows(s, device, corrected, uncorrected, pending, failure))
EXPORT int nvmlDeviceGetRetiredPagesPendingStatus(uintptr_t device, int *pending)
    SERVED(nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGetRetiredPagesPendingStatus, retired_pages_pending(s, device, pending))
EXPORT int nvmlDeviceGetRetiredPages(uintptr_t device, int cause, unsigned *count, unsigned long long *addresses)
    SERVED(nvmlDeviceGetRetiredPages, nvmlDeviceGetRetiredPages, retired_pages(s, device, cause, count, addresses, NULL))
EXPORT int nvmlDeviceGetRetiredPages_v2(uintptr_t device, int cause, unsigned *count, unsigned long long *addresses, unsigned long long *timestamps)
    SERVED(nvmlDeviceGetRetiredPages_v2, nvmlDeviceGetRetiredPages_v2, retired_pages(s, device, cause, count, addresses, timestamps))

EXPORT int nvmlEventSetCreate(nvmlEventSet_t *set)
    SERVED(nvmlEventSetCreate, nvmlEventSetCreate, event_set_create(s, set))
EXPORT int nvmlDeviceGetSupportedEventTypes(uintptr_t device, unsigned long long *types)
    SERVED(nvmlDeviceGetSupportedEventTypes, nvmlDeviceGetSupportedEventTypes, supported_event_types(s, device, types))
EXPORT int nvmlDeviceRegisterEvents(uintptr_t device, unsigned long long types, nvmlEventSet_t set)
    SERVED(nvmlDeviceRegisterEvents, nvmlDeviceRegisterEvents, register_events(s, device, types, set))
EXPORT int nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout)
    SERVED(nvmlEventSetWait_v2, nvmlEventSetWait_v2, event_set_wait(s, set, data, timeout, 1))
EXPORT int nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_v1_t *data, unsigned timeout)
    SERVED(nvmlEventSetWait, nvmlEventSetWait, event_set_wait(s, set, data, timeout, 0))
EXPORT int nvmlEventSetFree(nvmlEventSet_t set)
    SERVED(nvmlEventSetFree, nvmlEventSetFree, event_set_free(s, set))

/* Everything else: NOT_SUPPORTED, whatever the arguments (the caller cleans up its own stack on
 * x86-64 and AArch64, so a function that ignores its parameters is safe to call with any). */
#define UNSUPPORTED(symbol) \
    EXPORT int symbol(void) { return trace(#symbol, NVML_ERROR_NOT_SUPPORTED); }
#include "unsupported.h"
