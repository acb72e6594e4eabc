"""The charts of the HTML reports, one module each; every builder returns ``Svg.to_dict()``.

Diagnosis report: ``steps`` (step time per step, stacked), ``breakdown`` (GPU time per rank and
kernel time by class), ``timeline`` (the GPU streams of one step), ``roofline``, ``memory``.
Compare report: ``compare_bars`` (the mean step per side, stacked), ``waterfall`` (from the
before step to the after step, one bar per contributor). A new chart is a new module here; the
page modules (``diagnose_page``, ``compare_page``) call it and add the tables around it.
"""
