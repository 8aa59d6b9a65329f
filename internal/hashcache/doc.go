// Package hashcache remembers the sha256 of large input files, keyed by what
// the file system says about each file — path, size, modification time,
// status-change time, inode and device — the way restic and git decide that
// a file is unchanged without reading it. A merge records the sha256 of every
// base file in its provenance; with the cache, merging a second adapter into
// the same base does not read gigabytes again only to hash them.
//
// An entry is used only if all six values are equal. Writing a file changes
// its modification and change times; replacing it (rename) changes the
// inode; touch -m with an old time still moves the change time, which no
// user-space call can set. Entries are stored only for files whose change
// time is at least two seconds older than the start of their hashing, so a
// file system with coarse timestamps cannot hide a write that happened in
// the same tick. Where the platform gives no inode or change time (not
// Linux) the cache never hits and every file is hashed.
//
// The cache is a folder of small JSON files, one per path, each written
// atomically; a damaged or foreign entry is a miss, never an error.
package hashcache
