"""The JSON contracts: the analysis document (``stallscope.analysis/3``), the diff (``stallscope.diff/1``)
and the job key, written and read here and nowhere else."""
