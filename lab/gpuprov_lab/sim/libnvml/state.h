/* The simulated driver's state file (schema gpuprov.sim/v1, docs/architecture.md "Simulated driver
 * state"): read into plain structs, written back whole, and the reset and reboot rules.
 *
 * Readers read without a lock: writers replace the file atomically (a temp file in the same
 * directory, renamed over it), so a read is a consistent snapshot. A change is a read-modify-write
 * under an exclusive flock on "<state>.lock", the same lock the Python writers
 * (lab/gpuprov_lab/sim/state.py) take, so both kinds of writer interoperate.
 *
 *   char problem[512];
 *   int lock = state_lock(path, problem, sizeof(problem));
 *   struct sim_state *s = state_load(path, problem, sizeof(problem));
 *   s->gpus[0].busy = 1;
 *   state_save(path, s, problem, sizeof(problem));
 *   state_free(s);
 *   state_unlock(lock);
 */
#ifndef GPUPROV_STATE_H
#define GPUPROV_STATE_H

#include <stddef.h>

#include "catalog.h"

#define MAX_GPUS 64
#define MAX_GIS 8     /* a GPU has at most 7 GPU instances (7 compute slices) */
#define MAX_CIS 8     /* a GPU instance has at most 7 compute instances */
#define MAX_PAGES 64  /* retired pages per cause */
#define MAX_HOLDERS 8 /* systemd units in held_by */
#define NAME_SIZE 128

/* A count from the file: its value, and its exact digits when it does not fit in 64 bits (the
 * value is then ULLONG_MAX). NVML's counters are at most 64 bits wide, so a reader clamps to the
 * largest value it can report; a rewrite of the file keeps the digits as they were. */
struct sim_count {
    unsigned long long value;
    char exact[48];
};

struct sim_ci {
    unsigned id, profile_id, start, size;
};
struct sim_gi {
    unsigned id, profile_id, start, size, ci_count;
    struct sim_ci cis[MAX_CIS]; /* by id */
};
struct sim_page {
    unsigned long long address, timestamp;
};
/* A GPU's memory error state (gpuprov_lab.sim.state.new_health); all zero when the file has none. */
struct sim_health {
    struct sim_count ecc[2][2]; /* [corrected, uncorrected][volatile, aggregate] */
    struct sim_count remap_corrected, remap_uncorrected;
    int remap_pending, remap_failure;
    unsigned page_count[2]; /* [single_bit, double_bit] */
    struct sim_page pages[2][MAX_PAGES];
    int pages_pending;
};
struct sim_gpu {
    unsigned index;
    char model_name[NAME_SIZE]; /* as the file writes it */
    const struct sim_model *model;
    char uuid[96];
    char pci_bus_id[32];
    int mig_current, mig_pending;
    unsigned gi_count;
    struct sim_gi gis[MAX_GIS]; /* by id */
    int busy;
    unsigned holder_count;
    char held_by[MAX_HOLDERS][NAME_SIZE];
    int has_health; /* the file has a "health" object for this GPU */
    struct sim_health health;
};
/* faults.fail_after: `function` fails with `error` once it has let `successes` calls through;
 * `succeeded` is the persisted count of those, so the budget spans processes. */
struct sim_fault {
    int set;
    char function[NAME_SIZE];
    unsigned long long successes, succeeded;
    int has_succeeded;
    int has_error; /* the key is present: a name, or null when error[0] is empty */
    char error[64];
};
struct sim_state {
    int loaded;
    char version[64];
    unsigned gpu_count;
    struct sim_gpu gpus[MAX_GPUS];
    struct sim_fault fault;
};

/* GPUPROV_NVML_SIM, else the lab's default path. */
const char *state_path(void);
/* The state in `path`, or NULL with what is wrong in `problem` ("<path>: ..."). */
struct sim_state *state_load(const char *path, char *problem, size_t size);
void state_free(struct sim_state *state);
/* Replaces `path` atomically with `state` (mode 0644); 0 on success. */
int state_save(const char *path, const struct sim_state *state, char *problem, size_t size);
/* Holds the exclusive lock of `path` (its sidecar "<path>.lock"); the fd, or -1. */
int state_lock(const char *path, char *problem, size_t size);
void state_unlock(int lock);

/* Whether `text` is a driver version like 550.127.05 (state.py _DRIVER_VERSION:
 * \d{2,4}(\.\d{1,4}){1,2}). */
int state_driver_version_valid(const char *text);
/* Whether fault `f` has fired: it has let its `successes` calls through. */
int fault_fired(const struct sim_fault *f);
/* A GPU reset's effect: pending MIG mode current, instances gone,
 * pending row remappings active, volatile ECC counts cleared. */
void state_reset_gpu(struct sim_gpu *gpu);
/* A host reboot's effect: every GPU reset, processes gone, pending
 * retired pages retired. */
void state_reboot(struct sim_state *state);
/* Who holds `gpu` open: 1 when busy or an active systemd unit in held_by; the first holder's
 * name in `who`. */
int state_held(const struct sim_gpu *gpu, char *who, size_t size);
/* An ECC count as NVML reports it (clamped to 64 bits) and set from a new value. */
void count_set(struct sim_count *count, unsigned long long value);

#endif
