"""stallscope dashboard and HTML reports: render analyzer results, never re-derive them."""
