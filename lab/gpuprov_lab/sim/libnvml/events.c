/* Event sets over the event log beside the state file; see events.h. */
#include "events.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvml_abi.h"

#define SET_MAGIC 0x65766e74u /* "evnt" */
#define POLL_FALLBACK_MS 250
#define CHUNK 4096

struct registration {
    unsigned gpu;
    unsigned long long types;
    long long from; /* the log's length when it registered: earlier events are not for it */
};

struct sim_event_set {
    unsigned magic;
    pthread_mutex_t mutex;
    char log[PATH_MAX]; /* the event log; empty until the first registration */
    const char *log_name; /* its last path component, for inotify's events */
    int inotify;          /* -1: no inotify, sleep between reads */
    dev_t dev;            /* the log file the offsets are in (0: none seen yet) */
    ino_t ino;
    long long cursor;     /* where the next unread line starts */
    struct registration *registrations;
    unsigned count, capacity;
};

int events_valid(const struct sim_event_set *set) { return set != NULL && set->magic == SET_MAGIC; }

int events_create(struct sim_event_set **out)
{
    struct sim_event_set *set;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    set = calloc(1, sizeof(*set));
    if (set == NULL)
        return NVML_ERROR_UNKNOWN;
    set->magic = SET_MAGIC;
    set->inotify = -1;
    pthread_mutex_init(&set->mutex, NULL);
    *out = set;
    return NVML_SUCCESS;
}

int events_free(struct sim_event_set *set)
{
    if (!events_valid(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    if (set->inotify >= 0)
        close(set->inotify);
    pthread_mutex_destroy(&set->mutex);
    free(set->registrations);
    free(set);
    return NVML_SUCCESS;
}

/* Follow the log file the offsets belong to: when the log is another file than before (created,
 * or replaced) or shorter (truncated), everything in it came after every registration so far. */
static void follow(struct sim_event_set *set, const struct stat *st)
{
    dev_t dev = st ? st->st_dev : 0;
    ino_t ino = st ? st->st_ino : 0;
    long long size = st ? (long long)st->st_size : 0;
    if (dev == set->dev && ino == set->ino && size >= set->cursor)
        return;
    set->dev = dev;
    set->ino = ino;
    set->cursor = 0;
    for (unsigned i = 0; i < set->count; i++)
        set->registrations[i].from = 0;
}

static void watch(struct sim_event_set *set)
{
    char directory[PATH_MAX];
    const char *slash = strrchr(set->log, '/');
    set->log_name = slash ? slash + 1 : set->log;
    if (slash == NULL)
        snprintf(directory, sizeof(directory), ".");
    else if (slash == set->log)
        snprintf(directory, sizeof(directory), "/");
    else
        snprintf(directory, sizeof(directory), "%.*s", (int)(slash - set->log), set->log);
    set->inotify = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (set->inotify >= 0 &&
        inotify_add_watch(set->inotify, directory,
                          IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_ATTRIB) < 0) {
        close(set->inotify);
        set->inotify = -1;
    }
}

int events_register(struct sim_event_set *set, const char *state_path, unsigned gpu,
                    unsigned long long types)
{
    char log[PATH_MAX];
    struct stat st;
    int rc = NVML_SUCCESS;
    if (!events_valid(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (snprintf(log, sizeof(log), "%s.events", state_path) >= (int)sizeof(log))
        return NVML_ERROR_UNKNOWN;
    pthread_mutex_lock(&set->mutex);
    if (set->log[0] == '\0') {
        strcpy(set->log, log);
        watch(set);
    }
    if (strcmp(set->log, log) != 0) {
        rc = NVML_ERROR_INVALID_ARGUMENT; /* one set, one host */
    } else if (types != 0) {
        int exists = stat(set->log, &st) == 0;
        follow(set, exists ? &st : NULL);
        if (set->count == set->capacity) {
            unsigned capacity = set->capacity ? 2 * set->capacity : 8;
            struct registration *grown =
                realloc(set->registrations, capacity * sizeof(*grown));
            if (grown == NULL) {
                rc = NVML_ERROR_UNKNOWN;
                goto done;
            }
            set->registrations = grown;
            set->capacity = capacity;
        }
        set->registrations[set->count++] =
            (struct registration){gpu, types, exists ? (long long)st.st_size : 0};
    }
done:
    pthread_mutex_unlock(&set->mutex);
    return rc;
}

static int wanted(const struct sim_event_set *set, const struct sim_event *e, long long at)
{
    for (unsigned i = 0; i < set->count; i++) {
        const struct registration *r = &set->registrations[i];
        if (r->gpu == e->gpu && (r->types & e->type) && at >= r->from)
            return 1;
    }
    return 0;
}

/* The next event for this set after its cursor, if the log has one; complete lines only (a
 * line being appended may show in part). Called with the set's mutex held. */
static int next_event(struct sim_event_set *set, struct sim_event *out)
{
    char chunk[CHUNK + 1];
    struct stat st;
    int fd, found = 0;
    if (set->log[0] == '\0')
        return 0;
    fd = open(set->log, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    follow(set, &st);
    while (!found) {
        ssize_t n = pread(fd, chunk, CHUNK, (off_t)set->cursor);
        char *line = chunk, *end;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        chunk[n] = '\0';
        while (!found && (end = memchr(line, '\n', (size_t)(chunk + n - line))) != NULL) {
            struct sim_event e;
            long long at = set->cursor;
            *end = '\0';
            set->cursor += end + 1 - line;
            if (sscanf(line, "%u %llu %llu %u %u", &e.gpu, &e.type, &e.data, &e.gpu_instance,
                       &e.compute_instance) == 5 &&
                wanted(set, &e, at)) {
                *out = e;
                found = 1;
            }
            line = end + 1;
        }
        if (line == chunk) {
            if (n == CHUNK)
                set->cursor += n; /* a line longer than any event: not one of ours, skip it */
            break;                /* else only a partial line is left: it completes later */
        }
    }
    close(fd);
    return found;
}

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Until the log (or the directory's entry for it) changes, or `ms` pass. */
static void sleep_for_change(const struct sim_event_set *set, long long ms)
{
    int timeout = ms > INT_MAX ? INT_MAX : (int)ms;
    if (set->inotify < 0) {
        poll(NULL, 0, timeout < POLL_FALLBACK_MS ? timeout : POLL_FALLBACK_MS);
        return;
    }
    for (;;) {
        struct pollfd p = {set->inotify, POLLIN, 0};
        char buffer[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        long long start = now_ms();
        int changed = 0;
        ssize_t n;
        if (poll(&p, 1, timeout) <= 0)
            return; /* timed out (or a signal: the caller looks again) */
        while ((n = read(set->inotify, buffer, sizeof(buffer))) > 0) {
            for (char *at = buffer; at < buffer + n;) {
                const struct inotify_event *e = (const struct inotify_event *)at;
                if ((e->mask & IN_Q_OVERFLOW) || (e->len && strcmp(e->name, set->log_name) == 0))
                    changed = 1;
                at += sizeof(*e) + e->len;
            }
        }
        if (changed)
            return;
        /* Another file of the directory changed (the state is rewritten there): wait on. */
        timeout -= (int)(now_ms() - start);
        if (timeout <= 0)
            return;
    }
}

int events_wait(struct sim_event_set *set, unsigned timeout_ms, struct sim_event *out)
{
    long long deadline;
    if (!events_valid(set) || out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    deadline = now_ms() + timeout_ms;
    for (;;) {
        long long left;
        int found;
        pthread_mutex_lock(&set->mutex);
        found = next_event(set, out);
        pthread_mutex_unlock(&set->mutex);
        if (found)
            return NVML_SUCCESS;
        left = deadline - now_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        sleep_for_change(set, left);
    }
}

int events_raise(const char *state_path, const struct sim_event *event, char *problem,
                 size_t size)
{
    char log[PATH_MAX], line[128];
    int n, fd;
    ssize_t written;
    if (snprintf(log, sizeof(log), "%s.events", state_path) >= (int)sizeof(log)) {
        snprintf(problem, size, "%s: path too long", state_path);
        return -1;
    }
    n = snprintf(line, sizeof(line), "%u %llu %llu %u %u\n", event->gpu, event->type,
                 event->data, event->gpu_instance, event->compute_instance);
    fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(problem, size, "%s: cannot raise the event: %s", log, strerror(errno));
        return -1;
    }
    fchmod(fd, 0644); /* readable by every waiting process whatever the umask */
    do
        written = write(fd, line, (size_t)n);
    while (written < 0 && errno == EINTR);
    close(fd);
    if (written != n) {
        snprintf(problem, size, "%s: cannot raise the event: %s", log,
                 written < 0 ? strerror(errno) : "short write");
        return -1;
    }
    return 0;
}
