// Package home locates phonellm's own cache folder, $PHONELLM_HOME (default ~/.cache/phonellm, or the
// platform's user cache folder): npm installs of the pinned tools, auto-tune results, fleet state, the hash
// cache of merged base files and generated benchmark inputs all live under it. Every tree asks here, so the
// default is decided once.
package home
