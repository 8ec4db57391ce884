CREATE TABLE IF NOT EXISTS {table} (
    name   String,
    value  Float64,
    set_at DateTime DEFAULT now()
)
ENGINE = {engine}
ORDER BY name
