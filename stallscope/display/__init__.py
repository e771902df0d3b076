"""What every view says the same way: durations, kernel names, inline code, rule titles, the verdict's
evidence in words, and the glossary. The terminal renderers (``stallscope.render``), the HTML reports and
the dashboard (``stallscope.dashboard``) all format through these modules, so one value reads the same in
each; they hold text only (no plotly, dash or jinja) and read the analysis JSON's values, never the passes.
"""
