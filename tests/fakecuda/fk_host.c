/* The driver's host-function thread: a real driver runs a stream's host functions
 * (cuLaunchHostFunc, cuStreamAddCallback) on a thread of its own as soon as the stream reaches
 * them, whether or not the program ever synchronises; JAX waits for them to mark its buffers
 * ready. This thread, started by the first host function, completes each stream up to its first
 * pending host function (the device being instant, the work before it is done) whenever one is
 * queued; the function itself runs with fk.lock dropped (fk_work_execute). A sync point that
 * reaches a host function first runs it in the synchronising thread instead, likewise unlocked.
 *
 * Locking: host_mu guards the thread's state; the thread takes fk.lock like an entry point while
 * it works and never holds host_mu and fk.lock at once. Unload stops it (fk_host_stop) before it
 * takes fk.lock.
 */
#include <errno.h>
#include <time.h>

#include "tests/fakecuda/fk.h"

static pthread_mutex_t host_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t host_cv = PTHREAD_COND_INITIALIZER;
static int started, pending, busy, stopping;

/* The first host function queued on any live stream, its stream in *s; NULL when none. */
static struct fk_work *first_host(struct CUstream_st **s) {
  for (size_t i = 0; i < fk.nctxs; i++) {
    struct CUctx_st *c = fk.ctxs[i];
    for (size_t j = 0; j < c->nstreams; j++) {
      for (struct fk_work *w = c->streams[j]->head; w != NULL; w = w->next) {
        if (w->kind == FK_W_HOST) {
          *s = c->streams[j];
          return w;
        }
      }
    }
  }
  return NULL;
}

/* Runs every queued host function, each stream reaching it in order. Under fk.lock, which the
 * functions themselves drop: the queues are searched afresh after each. */
static void run_host_functions(void) {
  struct CUstream_st *s;
  struct fk_work *w;
  while ((w = first_host(&s)) != NULL) {
    fk_stream_reach(s, w->seq);
  }
}

static void *host_thread(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&host_mu);
    while (!pending && !stopping) {
      pthread_cond_wait(&host_cv, &host_mu);
    }
    if (stopping) {
      pthread_mutex_unlock(&host_mu);
      return NULL;
    }
    pending = 0;
    busy = 1;
    pthread_mutex_unlock(&host_mu);
    if (fk_enter("host functions", FK_NEED_INIT) == CUDA_SUCCESS) {
      run_host_functions();
    }
    fk_leave(CUDA_SUCCESS);
    pthread_mutex_lock(&host_mu);
    busy = 0;
    pthread_cond_broadcast(&host_cv);
    pthread_mutex_unlock(&host_mu);
  }
}

void fk_host_notify(void) {
  pthread_mutex_lock(&host_mu);
  pending = 1;
  if (!started && !stopping) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&t, &attr, host_thread, NULL) == 0;
    pthread_attr_destroy(&attr);
    if (!started) {
      fk_log("warning: no host-function thread; host functions run at sync points");
    }
  }
  pthread_cond_broadcast(&host_cv);
  pthread_mutex_unlock(&host_mu);
}

int fk_host_stop(void) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;
  pthread_mutex_lock(&host_mu);
  stopping = 1;
  pthread_cond_broadcast(&host_cv);
  int rc = 0;
  while (busy && rc != ETIMEDOUT) {
    rc = pthread_cond_timedwait(&host_cv, &host_mu, &until);
  }
  int idle = !busy;
  pthread_mutex_unlock(&host_mu);
  return idle;
}
