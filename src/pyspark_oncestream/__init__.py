"""Spark's automatic registration of Python data sources (Spark 4 looks, once per application, for
top-level modules named ``pyspark_*`` that define ``DefaultSource``): with oncestream installed,
``format("oncestream")`` exists in every SparkSession of the application and every thread, with
no ``oncestream.spark.register`` call."""

from oncestream.spark.data_source import OnceStreamDataSource as DefaultSource

__all__ = ["DefaultSource"]
