/* The on-disk cache of compiled kernels shared by the back-ends (diskcache.c).
 *
 * The folder: MKPY_CACHE_DIR, else $XDG_CACHE_HOME/mkpy, else ~/.cache/mkpy,
 * if it is a real folder of this user that nobody else can write; else a
 * private temporary folder for the process (one warning). An entry is
 * <32 hex digits> plus an extension: the object (.so for the CPU, .cubin for
 * CUDA), .key (the full key and the object's size and hash), the sources
 * (.metal, .cpp or .cu) and .lock (flock'ed by the process compiling it).
 * `stats` holds bytes, hits and misses of every process; past
 * MKPY_CACHE_MAX_BYTES the least recently used entries go. */
#ifndef MKB_DISKCACHE_H
#define MKB_DISKCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define MKB_CACHE_MAX_BYTES_DEFAULT ((int64_t)1 << 30)

extern _Atomic unsigned long mkb_tmp_seq; /* unique temporary names within the process */

/* 128-bit hash of a then b as 32 hex digits (the entry's name). */
void mkb_hash_hex(const char *a, const char *b, char out[33]);
char *mkb_read_file(const char *path);
int mkb_write_file(const char *path, const char *text);
int mkb_mkdirs_mode(const char *path, mode_t mode);
int mkb_mkdirs(const char *path);
/* Through mkk_set_warner's function (a Python warning), else stderr. */
void mkb_warn(const char *text);
int64_t mkb_env_int(const char *name, int64_t dflt);
int64_t mkb_file_size(const char *path);

/* The folder to use now: 0 and out filled, or -1 with an error set. */
int mkb_cache_dir(char *out, size_t n);
/* Writing into dir failed with errno err: later entries go to the private
 * folder (one warning). Returns 0 and the new folder in out, or -1. */
int mkb_cache_dir_failed(const char *dir, int err, char *out, size_t n);
/* Makes path (0700) and checks it is this user's alone; -1 and why otherwise. */
int mkb_private_dir_ok(const char *path, char *why, size_t n);

/* Is name an entry's file ("<hex><ext>")? Fills hex. */
int mkb_entry_file(const char *name, char hex[33]);
/* Bytes kept (count: entries kept); with cap >= 0 evicts the least recently
 * used entries down to 90% of cap when over it. -1 if unreadable. */
int64_t mkb_scan_dir(const char *dir, int64_t cap, int64_t *count);
typedef struct {
    int64_t bytes, hits, misses;
} mkb_disk_stats;
/* Adds to the folder's shared counters (and evicts when over the cap). */
int mkb_stats_update(const char *dir, int64_t add_bytes, int64_t hits, int64_t misses, bool rescan,
                     mkb_disk_stats *out);
/* Marks an entry's file used now. */
void mkb_touch(const char *path);

/* Writes key_path (through tmp_key, renamed) recording full_key and the size
 * and hash of the object tmp_obj. */
int mkb_write_key(const char *tmp_obj, const char *tmp_key, const char *key_path, const char *full_key);
/* 0 when key_path records full_key and obj_path's size and hash (st: the
 * file hashed). */
int mkb_check_entry(const char *obj_path, const char *key_path, const char *full_key, struct stat *st);
/* obj_path's bytes (malloc'd, *n of them) when they match key_path's record
 * of full_key; NULL otherwise. */
unsigned char *mkb_read_verified(const char *obj_path, const char *key_path, const char *full_key, size_t *n);

#endif
