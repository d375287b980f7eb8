/* Driver events across processes: what `gpuprov-sim inject xid` raises, delivered to the event
 * sets of every process that waits on that GPU (NVML's nvmlEventSet*, nvml_sim.c).
 *
 * The events of a state file are an append-only log beside it, "<state>.events", one line per
 * event ("<gpu index> <event type> <event data> <GPU instance id> <compute instance id>"). An
 * injector appends a line with one write(2) (O_APPEND, so concurrent appends never interleave);
 * an event set remembers, per registration, how long the log was when it registered ("All
 * events that occurred before this call are not recorded", nvmlDeviceRegisterEvents docs) and
 * reads on from its own offset, so each set sees every later event of its GPUs exactly once,
 * whichever process raised it. A waiting set sleeps in poll(2) on an inotify watch of the log's
 * directory: it wakes when the log changes or its timeout ends, and costs no CPU in between
 * (without inotify it sleeps 250 ms between reads).
 *
 *   struct sim_event_set *set;
 *   events_create(&set);
 *   events_register(set, "/var/lib/nvidia-sim/gpus.json", 0, nvmlEventTypeXidCriticalError);
 *   struct sim_event e;
 *   if (events_wait(set, 5000, &e) == NVML_SUCCESS) handle(e.gpu, e.data);   // else TIMEOUT
 *   events_free(set);
 */
#ifndef GPUPROV_EVENTS_H
#define GPUPROV_EVENTS_H

#include <stddef.h>

struct sim_event {
    unsigned gpu;
    unsigned long long type, data;
    unsigned gpu_instance, compute_instance;
};

struct sim_event_set;

/* NVML return codes. */
int events_create(struct sim_event_set **out);
int events_free(struct sim_event_set *set);
/* Whether `set` is a live set made by events_create. */
int events_valid(const struct sim_event_set *set);
/* Record from now on the events of `types` on GPU `gpu` of the state file `state_path`. */
int events_register(struct sim_event_set *set, const char *state_path, unsigned gpu,
                    unsigned long long types);
/* The next event, waiting at most `timeout_ms`: NVML_SUCCESS or NVML_ERROR_TIMEOUT. */
int events_wait(struct sim_event_set *set, unsigned timeout_ms, struct sim_event *out);

/* Append `event` to the log of `state_path`; 0, or -1 with the reason in `problem`. */
int events_raise(const char *state_path, const struct sim_event *event, char *problem,
                 size_t size);

#endif
