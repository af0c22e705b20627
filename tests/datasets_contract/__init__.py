"""Which `num_proc` values make each supported `datasets` release build a worker pool."""
