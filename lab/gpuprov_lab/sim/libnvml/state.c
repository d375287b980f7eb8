/* The state file: parse, validate, write, lock, and the reset rules; see state.h.
 *
 * Validation follows lab/gpuprov_lab/sim/state.py (_problem): every key the simulation reads must be
 * there with its type, and the first thing wrong is one message naming the key. Keys outside the
 * schema are not kept when this library rewrites the file.
 */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"
#include "sim_consts.h"

extern char **environ;

#define MAX_STATE_BYTES (1 << 24)

static const char *const KINDS[2] = {"corrected", "uncorrected"};
static const char *const COUNTERS[2] = {"volatile", "aggregate"};
static const char *const CAUSES[2] = {"single_bit", "double_bit"};

const char *state_path(void)
{
    const char *path = getenv(SIM_ENV);
    return path && *path ? path : SIM_STATE_PATH;
}

void state_free(struct sim_state *state) { free(state); }

void count_set(struct sim_count *count, unsigned long long value)
{
    count->value = value;
    count->exact[0] = '\0';
}

int fault_fired(const struct sim_fault *f) { return f->set && f->succeeded >= f->successes; }

/* -- reading --------------------------------------------------------------------------------- */

struct reader {
    char *problem;
    size_t size;
    const char *path;
};

/* Records "<path>: not a valid gpuprov.sim/v1 state file: <what>"; returns 0. */
__attribute__((format(printf, 2, 3))) static int invalid(struct reader *r, const char *format, ...)
{
    char what[400];
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof(what), format, args);
    va_end(args);
    snprintf(r->problem, r->size, "%s: not a valid %s state file: %s", r->path, SIM_SCHEMA, what);
    return 0;
}

static int get_bool(const struct json_node *object, const char *key, int *out)
{
    const struct json_node *n = json_get(object, key);
    if (n == NULL || (n->type != JSON_TRUE && n->type != JSON_FALSE))
        return 0;
    *out = n->type == JSON_TRUE;
    return 1;
}

static int get_string(const struct json_node *object, const char *key, char *out, size_t size)
{
    const struct json_node *n = json_get(object, key);
    if (n == NULL || n->type != JSON_STRING || strlen(n->string) >= size)
        return 0;
    strcpy(out, n->string);
    return 1;
}

static int get_uint(const struct json_node *object, const char *key, unsigned *out)
{
    unsigned long long value;
    int over;
    if (!json_count(json_get(object, key), &value, &over) || over || value > UINT_MAX)
        return 0;
    *out = (unsigned)value;
    return 1;
}

static int get_u64(const struct json_node *object, const char *key, unsigned long long *out)
{
    int over;
    return json_count(json_get(object, key), out, &over) && !over;
}

/* A count of any size: the exact digits are kept when it is wider than 64 bits. */
static int get_count(const struct json_node *object, const char *key, struct sim_count *out)
{
    const struct json_node *n = json_get(object, key);
    int over;
    if (!json_count(n, &out->value, &over))
        return 0;
    out->exact[0] = '\0';
    if (over) {
        if (n->lexeme_length >= sizeof(out->exact))
            return 0;
        memcpy(out->exact, n->lexeme, n->lexeme_length);
        out->exact[n->lexeme_length] = '\0';
    }
    return 1;
}

static int digits(const char **at, int least, int most)
{
    int n = 0;
    while (n < most && (*at)[0] >= '0' && (*at)[0] <= '9') {
        (*at)++;
        n++;
    }
    return n >= least;
}

int state_driver_version_valid(const char *text)
{
    int parts = 0;
    if (!digits(&text, 2, 4))
        return 0;
    while (*text == '.' && parts < 2) {
        text++;
        if (!digits(&text, 1, 4))
            return 0;
        parts++;
    }
    return parts >= 1 && *text == '\0';
}

static int hex_run(const char **at, int n)
{
    for (int i = 0; i < n; i++, (*at)++) {
        char c = **at;
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return 0;
    }
    return 1;
}

/* state.py _PCI_BUS_ID: [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7] */
static int pci_bus_id_shape(const char *text)
{
    return hex_run(&text, 8) && *text++ == ':' && hex_run(&text, 2) && *text++ == ':' &&
           hex_run(&text, 2) && *text++ == '.' && *text >= '0' && *text <= '7' && text[1] == '\0';
}

static int by_ci_id(const void *a, const void *b)
{
    unsigned x = ((const struct sim_ci *)a)->id, y = ((const struct sim_ci *)b)->id;
    return (x > y) - (x < y);
}

static int by_gi_id(const void *a, const void *b)
{
    unsigned x = ((const struct sim_gi *)a)->id, y = ((const struct sim_gi *)b)->id;
    return (x > y) - (x < y);
}

static int read_health(struct reader *r, const struct json_node *node, unsigned position,
                       struct sim_gpu *gpu)
{
    const struct json_node *health = json_get(node, "health");
    const struct json_node *ecc = json_get(health, "ecc");
    const struct json_node *rows = json_get(health, "remapped_rows");
    const struct json_node *retired = json_get(health, "retired_pages");
    struct sim_health *h = &gpu->health;
    int ok = 1;
    if (health == NULL)
        return 1;
    gpu->has_health = 1;
    for (int k = 0; k < 2 && ok; k++)
        for (int c = 0; c < 2 && ok; c++)
            ok = get_count(json_get(ecc, KINDS[k]), COUNTERS[c], &h->ecc[k][c]);
    ok = ok && get_count(rows, "corrected", &h->remap_corrected) &&
         get_count(rows, "uncorrected", &h->remap_uncorrected) &&
         get_bool(rows, "pending", &h->remap_pending) &&
         get_bool(rows, "failure", &h->remap_failure) &&
         get_bool(retired, "pending", &h->pages_pending);
    for (int c = 0; c < 2 && ok; c++) {
        const struct json_node *list = json_get(retired, CAUSES[c]);
        ok = list != NULL && list->type == JSON_ARRAY;
        for (const struct json_node *p = ok ? list->child : NULL; p != NULL && ok; p = p->next) {
            struct sim_page *page = &h->pages[c][h->page_count[c]];
            if (h->page_count[c] == MAX_PAGES)
                return invalid(r, "gpus[%u].health.retired_pages.%s has more than %d pages",
                               position, CAUSES[c], MAX_PAGES);
            ok = get_u64(p, "address", &page->address) &&
                 get_u64(p, "timestamp", &page->timestamp);
            h->page_count[c]++;
        }
    }
    if (!ok)
        return invalid(r,
                       "gpus[%u].health must be {ecc: {corrected, uncorrected}: {volatile, "
                       "aggregate}, remapped_rows: {corrected, uncorrected, pending, failure}, "
                       "retired_pages: {single_bit, double_bit, pending}} (see "
                       "gpuprov_lab.sim.state.new_health)",
                       position);
    return 1;
}

static int read_instances(struct reader *r, const struct json_node *gis, unsigned position,
                          struct sim_gpu *gpu)
{
    unsigned n = 0;
    for (const struct json_node *g = gis->child; g != NULL; g = g->next, n++) {
        struct sim_gi *gi = &gpu->gis[gpu->gi_count];
        const struct json_node *cis = json_get(g, "compute_instances");
        unsigned k = 0;
        if (gpu->gi_count == MAX_GIS)
            return invalid(r, "gpus[%u] has more than %d GPU instances", position, MAX_GIS);
        if (!get_uint(g, "id", &gi->id) || !get_uint(g, "profile_id", &gi->profile_id) ||
            !get_uint(g, "start", &gi->start) || !get_uint(g, "size", &gi->size) ||
            cis == NULL || cis->type != JSON_ARRAY)
            return invalid(r,
                           "gpus[%u].gpu_instances[%u] must have id, profile_id, start, size, "
                           "compute_instances",
                           position, n);
        for (const struct json_node *c = cis->child; c != NULL; c = c->next, k++) {
            struct sim_ci *ci = &gi->cis[gi->ci_count];
            if (gi->ci_count == MAX_CIS)
                return invalid(r, "gpus[%u].gpu_instances[%u] has more than %d compute instances",
                               position, n, MAX_CIS);
            if (!get_uint(c, "id", &ci->id) || !get_uint(c, "profile_id", &ci->profile_id) ||
                !get_uint(c, "start", &ci->start) || !get_uint(c, "size", &ci->size))
                return invalid(r,
                               "gpus[%u].gpu_instances[%u].compute_instances[%u] must have id, "
                               "profile_id, start, size",
                               position, n, k);
            gi->ci_count++;
        }
        qsort(gi->cis, gi->ci_count, sizeof(gi->cis[0]), by_ci_id);
        gpu->gi_count++;
    }
    qsort(gpu->gis, gpu->gi_count, sizeof(gpu->gis[0]), by_gi_id);
    return 1;
}

static int read_gpu(struct reader *r, const struct json_node *node, unsigned position,
                    struct sim_gpu *gpu)
{
    const struct json_node *gis = json_get(node, "gpu_instances");
    const struct json_node *held = json_get(node, "held_by");
    if (node->type != JSON_OBJECT || !get_uint(node, "index", &gpu->index) ||
        !get_string(node, "model", gpu->model_name, sizeof(gpu->model_name)) ||
        !get_string(node, "uuid", gpu->uuid, sizeof(gpu->uuid)) ||
        !get_string(node, "pci_bus_id", gpu->pci_bus_id, sizeof(gpu->pci_bus_id)) ||
        !get_bool(node, "mig_current", &gpu->mig_current) ||
        !get_bool(node, "mig_pending", &gpu->mig_pending) || gis == NULL ||
        gis->type != JSON_ARRAY || !get_bool(node, "busy", &gpu->busy) || held == NULL ||
        held->type != JSON_ARRAY)
        return invalid(r,
                       "gpus[%u] must have index (count), model (text), uuid (text), pci_bus_id "
                       "(text), mig_current (true|false), mig_pending (true|false), "
                       "gpu_instances (list), busy (true|false), held_by (list)",
                       position);
    if (gpu->index != position)
        return invalid(r, "gpus[%u].index is %u, expected %u", position, gpu->index, position);
    gpu->model = catalog_model(gpu->model_name);
    if (gpu->model == NULL)
        return invalid(r, "gpus[%u].model '%s' is not a catalog model", position, gpu->model_name);
    if (!pci_bus_id_shape(gpu->pci_bus_id))
        return invalid(r, "gpus[%u].pci_bus_id '%s' is not like 00000000:07:00.0", position,
                       gpu->pci_bus_id);
    for (const struct json_node *u = held->child; u != NULL; u = u->next) {
        if (u->type != JSON_STRING || strlen(u->string) >= NAME_SIZE)
            return invalid(r, "gpus[%u].held_by must list unit names", position);
        if (gpu->holder_count == MAX_HOLDERS)
            return invalid(r, "gpus[%u].held_by lists more than %d units", position, MAX_HOLDERS);
        strcpy(gpu->held_by[gpu->holder_count++], u->string);
    }
    return read_health(r, node, position, gpu) && read_instances(r, gis, position, gpu);
}

static int read_fault(struct reader *r, const struct json_node *root, struct sim_fault *f)
{
    const struct json_node *faults = json_get(root, "faults");
    const struct json_node *fault = json_get(faults, "fail_after");
    const struct json_node *error;
    if (faults == NULL || faults->type != JSON_OBJECT || fault == NULL ||
        (fault->type != JSON_NULL && fault->type != JSON_OBJECT))
        return invalid(r, "faults must be {fail_after: null or {function, successes, ...}}");
    if (fault->type == JSON_NULL)
        return 1;
    error = json_get(fault, "error");
    f->set = 1;
    f->has_succeeded = json_get(fault, "succeeded") != NULL;
    f->has_error = error != NULL;
    /* counts of any size: one beyond 64 bits is one that is never reached */
    if (!get_string(fault, "function", f->function, sizeof(f->function)) ||
        !json_count(json_get(fault, "successes"), &f->successes, NULL) ||
        (f->has_succeeded && !json_count(json_get(fault, "succeeded"), &f->succeeded, NULL)) ||
        (error != NULL && error->type != JSON_NULL &&
         !get_string(fault, "error", f->error, sizeof(f->error))))
        return invalid(r,
                       "faults.fail_after must be {function: text, successes: count, succeeded?, "
                       "error?}");
    return 1;
}

static int parse(struct reader *r, const char *text, size_t length, struct sim_state *state)
{
    struct json_arena arena;
    const struct json_node *root = json_parse(&arena, text, length);
    const struct json_node *schema = json_get(root, "schema");
    const struct json_node *driver = json_get(root, "driver");
    const struct json_node *gpus = json_get(root, "gpus");
    int ok = 1;
    if (root == NULL) {
        snprintf(r->problem, r->size, "%s: cannot read simulated driver state: not JSON", r->path);
        ok = 0;
    } else if (schema == NULL || schema->type != JSON_STRING ||
               strcmp(schema->string, SIM_SCHEMA) != 0) {
        snprintf(r->problem, r->size, "%s: not a %s state file", r->path, SIM_SCHEMA);
        ok = 0;
    } else if (driver == NULL || driver->type != JSON_OBJECT ||
               !get_bool(driver, "loaded", &state->loaded) ||
               !get_string(driver, "version", state->version, sizeof(state->version))) {
        ok = invalid(r, "driver must be {loaded: true|false, version: text}");
    } else if (!state_driver_version_valid(state->version)) {
        ok = invalid(r, "driver.version '%s' is not a driver version like 550.127.05",
                     state->version);
    } else if (!read_fault(r, root, &state->fault)) {
        ok = 0;
    } else if (gpus == NULL || gpus->type != JSON_ARRAY || gpus->child == NULL) {
        ok = invalid(r, "gpus must be a non-empty list");
    }
    for (const struct json_node *g = ok ? gpus->child : NULL; g != NULL && ok; g = g->next) {
        if (state->gpu_count == MAX_GPUS) {
            ok = invalid(r, "gpus has more than %d GPUs", MAX_GPUS);
            break;
        }
        ok = read_gpu(r, g, state->gpu_count, &state->gpus[state->gpu_count]);
        state->gpu_count++;
    }
    json_free(&arena);
    return ok;
}

struct sim_state *state_load(const char *path, char *problem, size_t size)
{
    struct reader r = {problem, size, path};
    struct sim_state *state = calloc(1, sizeof(*state));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    char *text = NULL;
    size_t length = 0;
    if (state == NULL) {
        snprintf(problem, size, "%s: out of memory", path);
        goto fail;
    }
    if (fd < 0) {
        if (errno == ENOENT)
            snprintf(problem, size, "%s: no simulated driver state (run `gpuprov-sim init`)",
                     path);
        else
            snprintf(problem, size, "%s: cannot read simulated driver state: %s", path,
                     strerror(errno));
        goto fail;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_STATE_BYTES) {
        snprintf(problem, size, "%s: cannot read simulated driver state: not a file of at most %d "
                 "bytes", path, MAX_STATE_BYTES);
        goto fail;
    }
    text = malloc((size_t)st.st_size + 1);
    while (text != NULL && length < (size_t)st.st_size) {
        ssize_t n = read(fd, text + length, (size_t)st.st_size - length);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        length += (size_t)n;
    }
    if (text == NULL || length != (size_t)st.st_size) {
        snprintf(problem, size, "%s: cannot read simulated driver state: %s", path,
                 text == NULL ? "out of memory" : "short read");
        goto fail;
    }
    if (!parse(&r, text, length, state))
        goto fail;
    free(text);
    close(fd);
    return state;
fail:
    free(text);
    free(state);
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* -- writing --------------------------------------------------------------------------------- */

static void write_count(struct json_writer *w, const struct sim_count *count)
{
    if (count->exact[0])
        json_raw(w, count->exact);
    else
        json_u64(w, count->value);
}

static void write_placed(struct json_writer *w, unsigned id, unsigned profile_id, unsigned start,
                         unsigned size)
{
    json_key(w, "id");
    json_u64(w, id);
    json_key(w, "profile_id");
    json_u64(w, profile_id);
    json_key(w, "start");
    json_u64(w, start);
    json_key(w, "size");
    json_u64(w, size);
}

static void write_health(struct json_writer *w, const struct sim_health *h)
{
    json_key(w, "health");
    json_begin(w, '{');
    json_key(w, "ecc");
    json_begin(w, '{');
    for (int k = 0; k < 2; k++) {
        json_key(w, KINDS[k]);
        json_begin(w, '{');
        for (int c = 0; c < 2; c++) {
            json_key(w, COUNTERS[c]);
            write_count(w, &h->ecc[k][c]);
        }
        json_end(w, '}');
    }
    json_end(w, '}');
    json_key(w, "remapped_rows");
    json_begin(w, '{');
    json_key(w, "corrected");
    write_count(w, &h->remap_corrected);
    json_key(w, "uncorrected");
    write_count(w, &h->remap_uncorrected);
    json_key(w, "pending");
    json_bool(w, h->remap_pending);
    json_key(w, "failure");
    json_bool(w, h->remap_failure);
    json_end(w, '}');
    json_key(w, "retired_pages");
    json_begin(w, '{');
    for (int c = 0; c < 2; c++) {
        json_key(w, CAUSES[c]);
        json_begin(w, '[');
        for (unsigned i = 0; i < h->page_count[c]; i++) {
            json_item(w);
            json_begin(w, '{');
            json_key(w, "address");
            json_u64(w, h->pages[c][i].address);
            json_key(w, "timestamp");
            json_u64(w, h->pages[c][i].timestamp);
            json_end(w, '}');
        }
        json_end(w, ']');
    }
    json_key(w, "pending");
    json_bool(w, h->pages_pending);
    json_end(w, '}');
    json_end(w, '}');
}

static void write_gpu(struct json_writer *w, const struct sim_gpu *gpu)
{
    json_begin(w, '{');
    json_key(w, "index");
    json_u64(w, gpu->index);
    json_key(w, "model");
    json_string(w, gpu->model_name);
    json_key(w, "uuid");
    json_string(w, gpu->uuid);
    json_key(w, "pci_bus_id");
    json_string(w, gpu->pci_bus_id);
    json_key(w, "mig_current");
    json_bool(w, gpu->mig_current);
    json_key(w, "mig_pending");
    json_bool(w, gpu->mig_pending);
    json_key(w, "gpu_instances");
    json_begin(w, '[');
    for (unsigned g = 0; g < gpu->gi_count; g++) {
        const struct sim_gi *gi = &gpu->gis[g];
        json_item(w);
        json_begin(w, '{');
        write_placed(w, gi->id, gi->profile_id, gi->start, gi->size);
        json_key(w, "compute_instances");
        json_begin(w, '[');
        for (unsigned c = 0; c < gi->ci_count; c++) {
            const struct sim_ci *ci = &gi->cis[c];
            json_item(w);
            json_begin(w, '{');
            write_placed(w, ci->id, ci->profile_id, ci->start, ci->size);
            json_end(w, '}');
        }
        json_end(w, ']');
        json_end(w, '}');
    }
    json_end(w, ']');
    json_key(w, "busy");
    json_bool(w, gpu->busy);
    json_key(w, "held_by");
    json_begin(w, '[');
    for (unsigned u = 0; u < gpu->holder_count; u++) {
        json_item(w);
        json_string(w, gpu->held_by[u]);
    }
    json_end(w, ']');
    if (gpu->has_health)
        write_health(w, &gpu->health);
    json_end(w, '}');
}

static void write_state(struct json_writer *w, const struct sim_state *s)
{
    json_begin(w, '{');
    json_key(w, "schema");
    json_string(w, SIM_SCHEMA);
    json_key(w, "driver");
    json_begin(w, '{');
    json_key(w, "loaded");
    json_bool(w, s->loaded);
    json_key(w, "version");
    json_string(w, s->version);
    json_end(w, '}');
    json_key(w, "gpus");
    json_begin(w, '[');
    for (unsigned i = 0; i < s->gpu_count; i++) {
        json_item(w);
        write_gpu(w, &s->gpus[i]);
    }
    json_end(w, ']');
    json_key(w, "faults");
    json_begin(w, '{');
    json_key(w, "fail_after");
    if (!s->fault.set) {
        json_null(w);
    } else {
        json_begin(w, '{');
        json_key(w, "function");
        json_string(w, s->fault.function);
        json_key(w, "successes");
        json_u64(w, s->fault.successes);
        if (s->fault.has_error) {
            json_key(w, "error");
            if (s->fault.error[0])
                json_string(w, s->fault.error);
            else
                json_null(w);
        }
        if (s->fault.has_succeeded) {
            json_key(w, "succeeded");
            json_u64(w, s->fault.succeeded);
        }
        json_end(w, '}');
    }
    json_end(w, '}');
    json_end(w, '}');
    json_raw(w, "\n");
}

static int write_all(int fd, const char *text, size_t length)
{
    while (length > 0) {
        ssize_t n = write(fd, text, length);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        text += n;
        length -= (size_t)n;
    }
    return 1;
}

int state_save(const char *path, const struct sim_state *state, char *problem, size_t size)
{
    struct json_writer w = {0};
    char tmp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    int fd, n;
    write_state(&w, state);
    if (w.failed) {
        snprintf(problem, size, "%s: cannot write the state: a name is not UTF-8, or no memory",
                 path);
        free(w.text);
        return -1;
    }
    if (slash == NULL)
        n = snprintf(tmp, sizeof(tmp), ".gpuprov-sim-XXXXXX");
    else
        n = snprintf(tmp, sizeof(tmp), "%.*s/.gpuprov-sim-XXXXXX", (int)(slash - path), path);
    if (n < 0 || (size_t)n >= sizeof(tmp)) {
        snprintf(problem, size, "%s: path too long", path);
        free(w.text);
        return -1;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        snprintf(problem, size, "%s: cannot write the state: %s", path, strerror(errno));
        free(w.text);
        return -1;
    }
    if (!write_all(fd, w.text, w.length) || fsync(fd) != 0 || fchmod(fd, 0644) != 0 ||
        close(fd) != 0 || rename(tmp, path) != 0) {
        snprintf(problem, size, "%s: cannot write the state: %s", path, strerror(errno));
        unlink(tmp);
        free(w.text);
        return -1;
    }
    free(w.text);
    return 0;
}

int state_lock(const char *path, char *problem, size_t size)
{
    char lock_path[PATH_MAX];
    int fd;
    if (snprintf(lock_path, sizeof(lock_path), "%s.lock", path) >= (int)sizeof(lock_path)) {
        snprintf(problem, size, "%s: path too long", path);
        return -1;
    }
    fd = open(lock_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(problem, size, "%s: cannot lock the state: %s", path, strerror(errno));
        return -1;
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            snprintf(problem, size, "%s: cannot lock the state: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
    }
    return fd;
}

void state_unlock(int lock)
{
    if (lock >= 0) {
        flock(lock, LOCK_UN);
        close(lock);
    }
}

/* -- the rules of resets and holders --------------------------------------------------------- */

void state_reset_gpu(struct sim_gpu *gpu)
{
    gpu->mig_current = gpu->mig_pending;
    gpu->gi_count = 0;
    /* "A reset will be required to actually remap the row" (nvmlDeviceGetRemappedRows docs). */
    gpu->health.remap_pending = 0;
    for (int k = 0; k < 2; k++)
        count_set(&gpu->health.ecc[k][0], 0);
}

void state_reboot(struct sim_state *state)
{
    for (unsigned i = 0; i < state->gpu_count; i++) {
        struct sim_gpu *gpu = &state->gpus[i];
        state_reset_gpu(gpu);
        /* Processes do not survive a reboot; systemd units in held_by start again and hold. */
        gpu->busy = 0;
        /* Dynamic page retirement: "reload the driver to activate" the pending pages. */
        gpu->health.pages_pending = 0;
    }
}

static int on_path(const char *program)
{
    const char *path = getenv("PATH");
    char candidate[PATH_MAX];
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        if (n > 0 && snprintf(candidate, sizeof(candidate), "%.*s/%s", (int)n, path, program) <
                         (int)sizeof(candidate) &&
            access(candidate, X_OK) == 0)
            return 1;
        path = end ? end + 1 : NULL;
    }
    return 0;
}

/* Without a running systemd a listed unit counts as active, so
 * the rule is the same in containers and on CI machines without systemd. */
static int unit_active(const char *unit)
{
    struct stat st;
    char *argv[] = {"systemctl", "is-active", "--quiet", (char *)unit, NULL};
    pid_t pid;
    int status;
    if (stat("/run/systemd/system", &st) != 0 || !S_ISDIR(st.st_mode) || !on_path("systemctl"))
        return 1;
    if (posix_spawnp(&pid, "systemctl", NULL, NULL, argv, environ) != 0)
        return 1;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int state_held(const struct sim_gpu *gpu, char *who, size_t size)
{
    if (gpu->busy) {
        snprintf(who, size, "process");
        return 1;
    }
    for (unsigned u = 0; u < gpu->holder_count; u++)
        if (unit_active(gpu->held_by[u])) {
            snprintf(who, size, "%s", gpu->held_by[u]);
            return 1;
        }
    return 0;
}
