"""Looking at a run: structured trajectory dumps (:mod:`roll.viewer.records`), the offline HTML
report of ``roll view`` (:mod:`roll.viewer.report`, assets in ``static/``), PNG learning curves
(:mod:`roll.viewer.plots`) and the localhost server of ``roll view --serve``. See docs/viewer.md."""
