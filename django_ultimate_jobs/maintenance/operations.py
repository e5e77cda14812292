"""``CreatePartitionedModel``: a migration operation for range-partitioned tables.

It is ``CreateModel`` whose ``CREATE TABLE`` ends in
``PARTITION BY RANGE (<column>)``. PostgreSQL requires the partition key in
every unique constraint, the primary key included: declare the model with a
``CompositePrimaryKey`` (Django 5.2+) that names the key column, e.g.
``pk = models.CompositePrimaryKey("id", "viewed_at")``. The parent holds no
rows itself: ``maintain_partitions`` (or the ``ultimate_jobs.partitions``
job) creates the partitions, so run it once after migrating.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import migrations

from ..errors import PartitionInvalid

__all__ = ["CreatePartitionedModel"]


class CreatePartitionedModel(migrations.CreateModel):
    """Create a model's table partitioned by range on ``partition_by``.

    Args:
        partition_by: the name of the field (a date or datetime) whose
            column is the partition key; the rest is ``CreateModel``'s.
    """

    def __init__(self, *args: Any, partition_by: str, **kwargs: Any) -> None:
        self.partition_by = partition_by
        super().__init__(*args, **kwargs)
        names = {name for name, _ in self.fields}
        if partition_by not in names:
            raise PartitionInvalid(
                f"partition_by={partition_by!r} is not a field of {self.name}",
                meta={"model": self.name},
            )
        if any(field.many_to_many for _, field in self.fields):
            raise PartitionInvalid(
                f"{self.name} has a many-to-many field: its join table would be "
                "partitioned too; declare the through model separately",
                meta={"model": self.name},
            )

    def deconstruct(self) -> tuple[str, Sequence[Any], dict[str, Any]]:
        """Write ``partition_by`` into the migration beside CreateModel's arguments."""
        name, args, kwargs = super().deconstruct()
        return name, args, {**kwargs, "partition_by": self.partition_by}

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        """Create the table with ``PARTITION BY RANGE`` on the key's column."""
        model = to_state.apps.get_model(app_label, self.name)
        column = model._meta.get_field(self.partition_by).column
        # table_sql() formats sql_create_table with %: escape the column's
        # own percent signs. The instance attribute shadows the class's for
        # this one table and is removed again whatever happens.
        quoted = schema_editor.quote_name(column).replace("%", "%%")
        schema_editor.sql_create_table = (
            type(schema_editor).sql_create_table + f" PARTITION BY RANGE ({quoted})"
        )
        try:
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        finally:
            del schema_editor.sql_create_table

    def describe(self) -> str:
        """The line ``migrate`` prints."""
        return f"Create model {self.name} partitioned by range on {self.partition_by}"

    def reduce(self, operation: Any, app_label: str) -> Any:
        """Never fold into a plain CreateModel (squashing would drop the partitioning)."""
        return False
