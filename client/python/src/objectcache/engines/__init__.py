"""The inference engines' adapters: LMCache in process (:mod:`~objectcache.engines.lmcache`) and
multi-process mode's L2 tier (:mod:`~objectcache.engines.lmcache_l2`), SGLang HiCache's L3 storage
(:mod:`~objectcache.engines.sglang`), their one settings parser (:mod:`~objectcache.engines.settings`)
and what a failed call becomes (:mod:`~objectcache.engines.failures`). Each is imported on its own,
by the engine, from its dotted path; this package imports none of them (nor the engines)."""
