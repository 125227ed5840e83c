/* pickle: writes Python pickle data (protocol 2) into a growing buffer, with only the opcodes
 * both Python's unpickler and PyTorch's memory viewer (MemoryViz.js, which has its own
 * unpickler) read: PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS, TUPLE2, BINUNICODE,
 * BININT1, BININT2, BININT, LONG1, NONE, NEWTRUE, NEWFALSE and STOP. No memo: every value is
 * written where it is used.
 *
 * A dict is pk_dict, then pk_mark, key value pairs, pk_setitems. A list is pk_list, then
 * pk_mark, its items, pk_appends; long lists go in batches of at most PICKLE_BATCH items (as
 * Python's pickler writes them: the viewer spreads each batch into a function call's
 * arguments). Memory errors are sticky: pk->failed, checked once at the end.
 */
#ifndef GPUCAP_SCRIPTS_PICKLE_H
#define GPUCAP_SCRIPTS_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PICKLE_BATCH 1000

typedef struct pk {
  unsigned char *buf; /* malloc'ed; the caller frees it */
  size_t len, cap;
  bool failed; /* memory ran out: buf holds a prefix */
} pk_t;

void pk_begin(pk_t *pk); /* PROTO 2 */
void pk_end(pk_t *pk);   /* STOP */
void pk_dict(pk_t *pk);
void pk_list(pk_t *pk);
void pk_mark(pk_t *pk);
void pk_setitems(pk_t *pk);
void pk_appends(pk_t *pk);
void pk_tuple2(pk_t *pk);
void pk_none(pk_t *pk);
void pk_bool(pk_t *pk, bool v);
void pk_int(pk_t *pk, int64_t v);
void pk_uint(pk_t *pk, uint64_t v);
void pk_str(pk_t *pk, const char *s); /* UTF-8 text */

/* One more item of a list being written: after every PICKLE_BATCH items, closes the batch and
 * opens the next (APPENDS, MARK). *count counts the items of the open batch. */
void pk_next_item(pk_t *pk, size_t *count);

#endif
