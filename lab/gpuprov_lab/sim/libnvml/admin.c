/* The gpuprovSim* API (gpuprov_sim.h): what the hardware does outside NVML (create a host, load
 * the driver, reset, reboot, faults, XIDs in the kernel log), over the state file whose format
 * lab/gpuprov_lab/sim/state.py writes and the kernel log gpuprov/host/health/kernel_log.py reads. */
#include "gpuprov_sim.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "events.h"
#include "nvml_abi.h"
#include "sim_consts.h"
#include "state.h"
#include "uuid5.h"

/* LOG_ERR (3) in facility kern (0): the level NVRM logs XIDs at (kernel_log.PRIORITY). */
#define KMSG_PRIORITY 3
/* Bus numbers spaced like the slots of an 8-GPU baseboard, 07 to E7 (state.new_gpu). */
#define MAX_NEW_GPUS 15

static __thread char last_error[1024];

GPUPROV_SIM_API const char *gpuprovSimLastError(void) { return last_error; }

__attribute__((format(printf, 1, 2))) static int fail(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof(last_error), format, args);
    va_end(args);
    return -1;
}

static const char *resolve(const char *path) { return path && *path ? path : state_path(); }

GPUPROV_SIM_API const char *gpuprovSimStatePath(const char *path) { return resolve(path); }

static struct sim_gpu *gpu_at(struct sim_state *s, int index)
{
    if (index < 0 || (unsigned)index >= s->gpu_count) {
        fail("no GPU %d (the host has %u)", index, s->gpu_count);
        return NULL;
    }
    return &s->gpus[index];
}

/* Load `path` under its lock, let `change` change it (0: write it, 1 or -1: leave it), unlock. */
typedef int change_fn(struct sim_state *s, const void *arg);

static int transact(const char *path, change_fn *change, const void *arg)
{
    int lock, rc = -1;
    struct sim_state *s;
    if (access(path, F_OK) != 0 && errno == ENOENT) /* not even a lock file without a state */
        return fail("%s: no simulated driver state (run `gpuprov-sim init`)", path);
    lock = state_lock(path, last_error, sizeof(last_error));
    s = lock < 0 ? NULL : state_load(path, last_error, sizeof(last_error));
    if (s != NULL) {
        rc = change(s, arg);
        if (rc == 0 && state_save(path, s, last_error, sizeof(last_error)) != 0)
            rc = -1;
    }
    state_free(s);
    state_unlock(lock);
    return rc;
}

static int make_directories(const char *path)
{
    char directory[PATH_MAX];
    char *slash;
    if (snprintf(directory, sizeof(directory), "%s", path) >= (int)sizeof(directory))
        return fail("%s: path too long", path);
    slash = strrchr(directory, '/');
    if (slash == NULL || slash == directory)
        return 0;
    *slash = '\0';
    for (char *at = directory + 1; *at; at++)
        if (*at == '/') {
            *at = '\0';
            if (mkdir(directory, 0755) != 0 && errno != EEXIST)
                return fail("%s: cannot make the directory: %s", directory, strerror(errno));
            *at = '/';
        }
    if (mkdir(directory, 0755) != 0 && errno != EEXIST)
        return fail("%s: cannot make the directory: %s", directory, strerror(errno));
    return 0;
}

GPUPROV_SIM_API int gpuprovSimCreate(const char *path, const char *model_name, int count,
                                     const char *seed, const char *driver_version,
                                     unsigned long long mig_at_boot)
{
    const struct sim_model *model = model_name ? catalog_model(model_name) : NULL;
    struct sim_state *s;
    char known[512];
    int lock, rc;
    path = resolve(path);
    driver_version = driver_version ? driver_version : DEFAULT_DRIVER_VERSION;
    if (model == NULL) {
        catalog_aliases(known, sizeof(known));
        return fail("unknown GPU model '%s'; known: %s", model_name ? model_name : "", known);
    }
    if (count < 1)
        return fail("a host needs at least one GPU, not %d", count);
    if (count > MAX_NEW_GPUS)
        return fail("a simulated host has at most %d GPUs, not %d", MAX_NEW_GPUS, count);
    if (count < 64 && mig_at_boot >> count)
        return fail("MIG at boot names a GPU the host does not have (it has %d)", count);
    if (mig_at_boot && model->profile_count == 0)
        return fail("%s has no MIG mode", model->alias);
    if (!state_driver_version_valid(driver_version))
        return fail("driver version '%s' is not a driver version like 550.127.05",
                    driver_version);
    if (strlen(seed ? seed : "") > 200)
        return fail("a seed of at most 200 characters, please");
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return fail("out of memory");
    s->loaded = 1;
    snprintf(s->version, sizeof(s->version), "%s", driver_version);
    s->gpu_count = (unsigned)count;
    for (int i = 0; i < count; i++) {
        struct sim_gpu *gpu = &s->gpus[i];
        char name[256];
        gpu->index = (unsigned)i;
        snprintf(gpu->model_name, sizeof(gpu->model_name), "%s", model->alias);
        gpu->model = model;
        snprintf(name, sizeof(name), "%s/%d", seed ? seed : "", i);
        memcpy(gpu->uuid, "GPU-", 4);
        uuid5(catalog_gpu_uuid_namespace(), name, gpu->uuid + 4);
        snprintf(gpu->pci_bus_id, sizeof(gpu->pci_bus_id), "00000000:%02X:00.0", 0x07 + 0x10 * i);
        gpu->mig_current = gpu->mig_pending = (int)(mig_at_boot >> i & 1);
        gpu->has_health = 1;
    }
    rc = make_directories(path);
    lock = rc == 0 ? state_lock(path, last_error, sizeof(last_error)) : -1;
    if (lock < 0 || state_save(path, s, last_error, sizeof(last_error)) != 0)
        rc = -1;
    state_unlock(lock);
    free(s);
    return rc;
}

GPUPROV_SIM_API int gpuprovSimCheck(const char *path)
{
    struct sim_state *s = state_load(resolve(path), last_error, sizeof(last_error));
    state_free(s);
    return s ? 0 : -1;
}

GPUPROV_SIM_API int gpuprovSimGpuCount(const char *path)
{
    struct sim_state *s = state_load(resolve(path), last_error, sizeof(last_error));
    int count = s ? (int)s->gpu_count : -1;
    state_free(s);
    return count;
}

struct driver_change {
    const char *version;
    int loaded;
};

static int change_driver(struct sim_state *s, const void *arg)
{
    const struct driver_change *d = arg;
    if (d->version) {
        if (!state_driver_version_valid(d->version))
            return fail("driver version '%s' is not a driver version like 550.127.05",
                        d->version);
        snprintf(s->version, sizeof(s->version), "%s", d->version);
    }
    if (d->loaded >= 0)
        s->loaded = d->loaded != 0;
    return 0;
}

GPUPROV_SIM_API int gpuprovSimSetDriver(const char *path, const char *version, int loaded)
{
    struct driver_change d = {version, loaded};
    return transact(resolve(path), change_driver, &d);
}

/* -- the kernel log: /dev/kmsg records beside the state file ------------------------------- */

static int kernel_log_path(const char *state, char *out, size_t size)
{
    const char *slash = strrchr(state, '/');
    int n = slash ? snprintf(out, size, "%.*s/%s", (int)(slash - state), state, SIM_KERNEL_LOG_NAME)
                  : snprintf(out, size, "%s", SIM_KERNEL_LOG_NAME);
    return n > 0 && (size_t)n < size ? 0 : fail("%s: path too long", state);
}

/* Lines in the log so far: the next record's sequence number. */
static long long records(int fd)
{
    char buffer[8192];
    long long lines = 0;
    ssize_t n;
    char last = '\n';
    while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
        for (ssize_t i = 0; i < n; i++)
            lines += buffer[i] == '\n';
        last = buffer[n - 1];
    }
    return lines + (last != '\n');
}

/* Appends `message` as the kernel would, "PRIORITY,SEQUENCE,USEC,FLAGS;MESSAGE"
 * (Documentation/ABI/testing/dev-kmsg), under the log's own lock. */
static int kernel_log_append(const char *state, const char *message)
{
    char log[PATH_MAX], record[1024];
    struct timespec boot;
    int lock, fd, n, rc = 0;
    if (kernel_log_path(state, log, sizeof(log)) != 0)
        return -1;
    lock = state_lock(log, last_error, sizeof(last_error));
    if (lock < 0)
        return -1;
    fd = open(log, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        state_unlock(lock);
        return fail("%s: %s", log, strerror(errno));
    }
    clock_gettime(CLOCK_BOOTTIME, &boot);
    n = snprintf(record, sizeof(record), "%d,%lld,%lld,-;%s\n", KMSG_PRIORITY, records(fd),
                 (long long)boot.tv_sec * 1000000 + boot.tv_nsec / 1000, message);
    if (n < 0 || (size_t)n >= sizeof(record) || write(fd, record, (size_t)n) != n)
        rc = fail("%s: cannot append the record: %s", log, strerror(errno));
    fchmod(fd, 0644);
    close(fd);
    state_unlock(lock);
    return rc;
}

/* An empty log, as after a boot (the ring buffer starts anew). */
static int kernel_log_clear(const char *state)
{
    char log[PATH_MAX];
    int lock, fd;
    if (kernel_log_path(state, log, sizeof(log)) != 0)
        return -1;
    lock = state_lock(log, last_error, sizeof(last_error));
    if (lock < 0)
        return -1;
    fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        fchmod(fd, 0644);
        close(fd);
    }
    state_unlock(lock);
    return fd < 0 ? fail("%s: %s", log, strerror(errno)) : 0;
}

/* -- boot and reset --------------------------------------------------------------------------- */

static int change_boot(struct sim_state *s, const void *arg)
{
    (void)arg;
    state_reboot(s);
    return 0;
}

GPUPROV_SIM_API int gpuprovSimBoot(const char *path)
{
    path = resolve(path);
    if (transact(path, change_boot, NULL) != 0)
        return -1;
    return kernel_log_clear(path);
}

/* A reset is refused while any client holds the GPU (NVIDIA MIG User Guide: "Any driver client
 * blocks the reset"). */
static int change_reset(struct sim_state *s, const void *arg)
{
    struct sim_gpu *gpu = gpu_at(s, *(const int *)arg);
    char holder[NAME_SIZE];
    if (gpu == NULL)
        return -1;
    if (state_held(gpu, holder, sizeof(holder))) {
        fail("In use by another client");
        return 1;
    }
    state_reset_gpu(gpu);
    return 0;
}

GPUPROV_SIM_API int gpuprovSimResetGpu(const char *path, int gpu)
{
    return transact(resolve(path), change_reset, &gpu);
}

/* -- holders and faults ----------------------------------------------------------------------- */

struct busy_change {
    int gpu, busy;
};

static int change_busy(struct sim_state *s, const void *arg)
{
    const struct busy_change *b = arg;
    struct sim_gpu *gpu = gpu_at(s, b->gpu);
    if (gpu == NULL)
        return -1;
    gpu->busy = b->busy != 0;
    return 0;
}

GPUPROV_SIM_API int gpuprovSimSetBusy(const char *path, int gpu, int busy)
{
    struct busy_change b = {gpu, busy};
    return transact(resolve(path), change_busy, &b);
}

struct hold_change {
    int gpu;
    const char *unit;
};

static int change_hold(struct sim_state *s, const void *arg)
{
    const struct hold_change *h = arg;
    struct sim_gpu *gpu = gpu_at(s, h->gpu);
    if (gpu == NULL)
        return -1;
    if (h->unit == NULL) {
        gpu->holder_count = 0;
        return 0;
    }
    if (!*h->unit || strlen(h->unit) >= NAME_SIZE)
        return fail("a unit name of 1 to %d characters, not '%.40s'", NAME_SIZE - 1, h->unit);
    for (unsigned u = 0; u < gpu->holder_count; u++)
        if (strcmp(gpu->held_by[u], h->unit) == 0)
            return 0;
    if (gpu->holder_count == MAX_HOLDERS)
        return fail("GPU %d is held by %d units already", h->gpu, MAX_HOLDERS);
    strcpy(gpu->held_by[gpu->holder_count++], h->unit);
    return 0;
}

GPUPROV_SIM_API int gpuprovSimHold(const char *path, int gpu, const char *unit)
{
    struct hold_change h = {gpu, unit};
    return transact(resolve(path), change_hold, &h);
}

static int change_fault(struct sim_state *s, const void *arg)
{
    s->fault = *(const struct sim_fault *)arg;
    return 0;
}

GPUPROV_SIM_API int gpuprovSimSetFault(const char *path, const char *function,
                                       unsigned long long successes, const char *error)
{
    struct sim_fault f = {0};
    int code;
    if (function != NULL) {
        error = error ? error : "NVML_ERROR_UNKNOWN";
        if (!catalog_faultable(function))
            return fail("the simulated driver has no function '%.100s'", function);
        if (strncmp(error, "NVML_ERROR_", 11) != 0 || !catalog_error_code(error, &code))
            return fail("unknown NVML error '%.100s'", error);
        f = (struct sim_fault){1, "", successes, 0, 1, 1, ""};
        snprintf(f.function, sizeof(f.function), "%s", function);
        snprintf(f.error, sizeof(f.error), "%s", error);
    }
    return transact(resolve(path), change_fault, &f);
}

/* -- health ----------------------------------------------------------------------------------- */

/* The driver's line for XID `code` (gpuprov.host.health.xid.line): "NVRM: Xid (PCI:0000:07:00): 79,
 * pid=0, name=, GPU has fallen off the bus". */
static int xid_line(const struct sim_gpu *gpu, unsigned code, long pid, const char *name,
                    char *out, size_t size)
{
    unsigned domain, bus, device, function;
    if (sscanf(gpu->pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
        return fail("not a PCI bus id: '%s'", gpu->pci_bus_id);
    snprintf(out, size, "NVRM: Xid (PCI:%04x:%02x:%02x): %u, pid=%ld, name=%s, %s", domain, bus,
             device, code, pid, name, catalog_xid_meaning(code));
    return 0;
}

GPUPROV_SIM_API int gpuprovSimInjectXid(const char *path, int index, unsigned xid, long pid,
                                        const char *name, unsigned gpu_instance,
                                        unsigned compute_instance)
{
    struct sim_state *s;
    struct sim_gpu *gpu;
    struct sim_event e = {(unsigned)index, nvmlEventTypeXidCriticalError, xid, gpu_instance,
                          compute_instance};
    char line[512];
    int rc;
    path = resolve(path);
    name = name ? name : "";
    if (strlen(name) > 100 || strchr(name, '\n'))
        return fail("a process name of one line and at most 100 characters, please");
    s = state_load(path, last_error, sizeof(last_error));
    if (s == NULL)
        return -1;
    gpu = gpu_at(s, index);
    rc = gpu ? xid_line(gpu, xid, pid, name, line, sizeof(line)) : -1;
    state_free(s);
    if (rc == 0)
        rc = kernel_log_append(path, line);
    if (rc == 0)
        rc = events_raise(path, &e, last_error, sizeof(last_error));
    return rc;
}

static struct sim_health *health_of(struct sim_state *s, int index)
{
    struct sim_gpu *gpu = gpu_at(s, index);
    if (gpu == NULL)
        return NULL;
    gpu->has_health = 1; /* a file from before health reads as healthy; it has health now */
    return &gpu->health;
}

struct ecc_change {
    int gpu, uncorrected;
    const unsigned long long *volatile_count, *aggregate;
    int grew; /* out: the volatile count grew */
};

static int change_ecc(struct sim_state *s, const void *arg)
{
    struct ecc_change *c = (struct ecc_change *)arg;
    struct sim_health *h = health_of(s, c->gpu);
    struct sim_count *counts;
    if (h == NULL)
        return -1;
    counts = h->ecc[c->uncorrected != 0];
    if (c->volatile_count) {
        c->grew = *c->volatile_count > counts[0].value;
        count_set(&counts[0], *c->volatile_count);
        if (counts[1].value < *c->volatile_count)
            count_set(&counts[1], *c->volatile_count);
    }
    if (c->aggregate)
        count_set(&counts[1], *c->aggregate);
    return 0;
}

GPUPROV_SIM_API int gpuprovSimSetEcc(const char *path, int gpu, int uncorrected,
                                     const unsigned long long *volatile_count,
                                     const unsigned long long *aggregate)
{
    struct ecc_change c = {gpu, uncorrected, volatile_count, aggregate, 0};
    struct sim_event e = {(unsigned)gpu,
                          uncorrected ? nvmlEventTypeDoubleBitEccError
                                      : nvmlEventTypeSingleBitEccError,
                          0, NVML_INSTANCE_ID_NONE, NVML_INSTANCE_ID_NONE};
    path = resolve(path);
    if (transact(path, change_ecc, &c) != 0)
        return -1;
    /* nvml.h: eventData "is 0 for any other event" than an XID */
    return c.grew ? events_raise(path, &e, last_error, sizeof(last_error)) : 0;
}

struct remap_change {
    int gpu, failure, clear;
};

static int change_remap(struct sim_state *s, const void *arg)
{
    const struct remap_change *c = arg;
    struct sim_health *h = health_of(s, c->gpu);
    if (h == NULL)
        return -1;
    if (c->clear) {
        h->remap_pending = h->remap_failure = 0;
        return 0;
    }
    /* A pending remapping follows an uncorrectable error in that row (row remapping docs). */
    h->remap_pending = 1;
    if (h->remap_uncorrected.value < ULLONG_MAX)
        count_set(&h->remap_uncorrected, h->remap_uncorrected.value + 1);
    if (c->failure)
        h->remap_failure = 1;
    return 0;
}

GPUPROV_SIM_API int gpuprovSimRemapPending(const char *path, int gpu, int failure, int clear)
{
    struct remap_change c = {gpu, failure, clear};
    return transact(resolve(path), change_remap, &c);
}

struct retire_change {
    int gpu, double_bit, pending;
};

static int change_retire(struct sim_state *s, const void *arg)
{
    const struct retire_change *c = arg;
    struct sim_health *h = health_of(s, c->gpu);
    unsigned cause = c->double_bit != 0, taken;
    if (h == NULL)
        return -1;
    if (h->page_count[cause] == MAX_PAGES)
        return fail("GPU %d has %d retired pages of that cause already", c->gpu, MAX_PAGES);
    taken = h->page_count[0] + h->page_count[1];
    /* Page-sized, distinct addresses; the timestamp is seconds since the epoch, as NVML's. */
    h->pages[cause][h->page_count[cause]++] =
        (struct sim_page){0x1000ULL * (taken + 1), 1700000000ULL + taken};
    if (c->pending)
        h->pages_pending = 1;
    return 0;
}

GPUPROV_SIM_API int gpuprovSimRetirePage(const char *path, int gpu, int double_bit, int pending)
{
    struct retire_change c = {gpu, double_bit, pending};
    return transact(resolve(path), change_retire, &c);
}
