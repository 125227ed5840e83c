/* Stream capture as gpucap must respect it. While a stream is being captured, work issued to
 * it becomes graph nodes, and waiting for it (a stream or context synchronisation) fails and
 * invalidates the capture, in whatever thread the wait is made. So gpucap passes captured
 * stream-ordered calls through (shim/entry/graph.h charges graph memory at launch), and never
 * synchronises a context itself while a capture may be going on: it counts the captures that
 * the program began and has not ended (the hooks are shim/entry/stream.c).
 */
#ifndef GPUCAP_SHIM_CAPTURE_H
#define GPUCAP_SHIM_CAPTURE_H

#include "shim/base/cudadefs.h"

#include <stdbool.h>

/* True iff stream (a per-thread-default-stream call when ptsz) is being captured: a
 * stream-ordered allocation or free on it becomes a graph node, and allocates or frees
 * nothing now. False when the driver cannot say. Asks the driver only while a capture is
 * counted (capture_any), so stream-ordered calls of a program that never captures cost no
 * extra driver call. */
bool capture_stream(CUstream stream, bool ptsz);

/* True iff some capture began and has not ended (a capture ended by its context's destruction
 * counts until the process ends): gpucap must not synchronise a context then. */
bool capture_any(void);

/* Sets the function a begin calls before its capture is counted, while gpucap may still
 * synchronise (the context layer's ctx_settle_all). Set once, from a constructor. */
void capture_before_begin(void (*fn)(void));

/* Brackets a context synchronisation gpucap makes on its own: enter returns false (and the
 * synchronisation must not be made) while a capture is counted; while entered, a capture
 * about to begin waits for capture_sync_leave. Checking capture_any and then synchronising
 * would let a capture begin in between, and the synchronisation invalidate it. */
bool capture_sync_enter(void);
void capture_sync_leave(void);

/* The hooks' side, around the driver's begin and end of a capture. capture_announce, before a
 * begin is passed on: runs the capture_before_begin function (the pools' last chance to
 * synchronise until the capture ends), counts the capture, then waits for gpucap's
 * synchronisations under way. capture_began, with the driver's answer to that begin: uncounts
 * the capture unless it began. capture_ended, with the driver's answer to an end: uncounts it
 * when the capture ended (success, or reported invalidated). Both return rc unchanged. */
void capture_announce(void);
CUresult capture_began(CUresult rc);
CUresult capture_ended(CUresult rc);

#endif
