/* The lab's pod sandbox program (gpuprov lab, the pause image's /pause).
 *
 * A sandbox's first process holds the pod's namespaces for its containers and does nothing
 * else: it waits for signals, reaps any child handed to it (SIGCHLD) and ends cleanly on
 * SIGTERM or SIGINT, which is how containerd stops a sandbox before it kills it. Built static
 * by lab/gpuprov_lab/images.py, so the image needs no libraries.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction end = {.sa_handler = stop};
  struct sigaction child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigaction(SIGINT, &end, NULL);
  sigaction(SIGTERM, &end, NULL);
  sigaction(SIGCHLD, &child, NULL);
  for (;;) {
    pause();
  }
}
