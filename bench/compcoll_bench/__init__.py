"""The lab: the ``compcoll`` command (``compcoll_bench.cli``), its benchmark harnesses
(``compcoll_bench.commands``), the emulated cluster (``compcoll_bench.emulate``), forecasts
(``compcoll_bench.forecast``) and training models. It uses the library (``collectives``,
``compressors``); the library never imports it. It lives in ``bench/compcoll_bench`` of the
source tree, beside the curated results of ``bench/results/`` (which do not ship with the
package); a user's runs write under ``./compcoll-results/``."""
