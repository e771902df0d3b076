from stallscope.cli import entry

entry()
