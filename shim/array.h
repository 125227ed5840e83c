/* CUDA arrays and mipmapped arrays under the cap (shim/array.c): the charge of each live array
 * is remembered by handle until the array is destroyed, by the program or with its context.
 * Thread-safe; the map of charged arrays has its own mutex, never held across a driver call.
 */
#ifndef GPUCAP_SHIM_ARRAY_H
#define GPUCAP_SHIM_ARRAY_H

#include "shim/cudadefs.h"

/* The driver destroyed ctx and with it every array and mipmapped array made in it: returns
 * their charges and forgets them. No driver call; O(charged arrays). */
void array_drop_context(CUcontext ctx);

/* fork() support (shim/fork.c), in the child: forget every array (the parent's memory is not
 * the child's). */
void array_fork_child(void);

#endif
